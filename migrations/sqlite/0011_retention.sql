-- Retention and legal hold of the tenant log (log.md §7).
-- A sweep empties the contents of receipts older than the tenant's retention that no hold covers:
-- every signed member but seq and receipt_id, the signature and the side channels. It keeps
-- tenant_id, seq, receipt_id and this_hash (the log's leaf data: the tiles are made of it) and
-- stamps pruned_at (NULL = kept). Full tiles in log_tiles are never touched.
ALTER TABLE receipts ADD COLUMN pruned_at TEXT;

-- One row per tenant that set a retention: days NULL = keep forever (also: no row).
-- pruned_through = the highest seq a sweep pruned (0: none), so lists need no scan to say so.
CREATE TABLE log_retention (
    tenant_id       TEXT PRIMARY KEY,
    days            BIGINT,
    updated_at      TEXT NOT NULL,
    pruned_through  BIGINT NOT NULL DEFAULT 0
);

-- Legal holds: no sweep touches a receipt with from_seq <= seq <= to_seq. Released = deleted.
CREATE TABLE log_holds (
    id          TEXT PRIMARY KEY,
    tenant_id   TEXT NOT NULL,
    from_seq    BIGINT NOT NULL,
    to_seq      BIGINT NOT NULL,
    reason      TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    created_by  TEXT NOT NULL
);
CREATE INDEX log_holds_tenant ON log_holds(tenant_id, from_seq);

-- A sweep deletes the guardrail events of the receipts it prunes, found by receipt id.
CREATE INDEX guardrail_events_receipt ON guardrail_events(receipt_id);
