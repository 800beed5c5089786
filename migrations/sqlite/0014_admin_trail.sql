-- The admin trail (docs/log.md §8): an `admin` receipt's signed `subject` member, the id of the
-- resource a management write or evidence read acted on. Every other receipt keeps ''.
ALTER TABLE receipts ADD COLUMN subject TEXT NOT NULL DEFAULT '';

-- GET /v1/audit-events reads a tenant's admin receipts newest first. A partial index: the
-- receipts of model and tool calls (nearly all of them) add nothing to it on append.
CREATE INDEX receipts_admin ON receipts(tenant_id, seq) WHERE kind = 'admin';
