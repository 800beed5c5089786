-- End users (issue 42 §6): per-end-user rate limits on a key, and spend per end user.
ALTER TABLE api_keys ADD COLUMN end_user_rpm_limit BIGINT;
ALTER TABLE api_keys ADD COLUMN end_user_tpm_limit BIGINT;

-- Spend and requests per (key, end user) and period (`total` and `YYYY-MM`), written by the
-- receipt writer in the receipts' own transaction, like `key_spend`. Read to seed end-user
-- budgets and by GET /v1/end-users; never on the request path.
CREATE TABLE end_user_spend (
    tenant_id    TEXT NOT NULL,
    key_id       TEXT NOT NULL,
    end_user     TEXT NOT NULL,
    period       TEXT NOT NULL,
    cost_usd     REAL NOT NULL DEFAULT 0,
    requests     BIGINT NOT NULL DEFAULT 0,
    last_seen_at TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (tenant_id, key_id, end_user, period)
);

-- Budgets with `scope = 'end_user'`: `scope_id` is whose end users (`key:<id>`, `team:<id>`,
-- `tenant:<id>`), `end_user` the one end user capped (NULL: each end user in scope).
ALTER TABLE budgets ADD COLUMN end_user TEXT;
