-- Issue 4: teams and members, budgets and budget requests, spend, policies, guardrail events,
-- and the cache side channels on receipts.

CREATE TABLE teams (
    id               TEXT PRIMARY KEY,
    tenant_id        TEXT NOT NULL REFERENCES tenants(id),
    name             TEXT NOT NULL,
    budget_pool_usd  REAL,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL,
    UNIQUE (tenant_id, name)
);

CREATE TABLE team_members (
    id           TEXT PRIMARY KEY,
    tenant_id    TEXT NOT NULL REFERENCES tenants(id),
    team_id      TEXT,
    email        TEXT NOT NULL,
    role         TEXT NOT NULL,
    idp_user_id  TEXT NOT NULL,
    name         TEXT NOT NULL,
    image_url    TEXT NOT NULL,
    joined_at    TEXT NOT NULL
);
CREATE INDEX team_members_tenant ON team_members(tenant_id, joined_at);

CREATE TABLE budgets (
    id          TEXT PRIMARY KEY,
    tenant_id   TEXT NOT NULL REFERENCES tenants(id),
    scope       TEXT NOT NULL,              -- key | team | tenant
    scope_id    TEXT NOT NULL,              -- key id, team id, or the tenant id
    amount_usd  REAL NOT NULL,
    period      TEXT NOT NULL,              -- monthly | total
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL
);
CREATE INDEX budgets_tenant ON budgets(tenant_id, created_at);

CREATE TABLE budget_requests (
    id            TEXT PRIMARY KEY,
    tenant_id     TEXT NOT NULL REFERENCES tenants(id),
    budget_id     TEXT NOT NULL,
    amount_usd    REAL NOT NULL,
    reason        TEXT NOT NULL,
    status        TEXT NOT NULL,            -- pending | approved | denied
    requested_by  TEXT NOT NULL,            -- key id
    created_at    TEXT NOT NULL,
    decided_at    TEXT,
    decided_by    TEXT
);
CREATE INDEX budget_requests_tenant ON budget_requests(tenant_id, created_at);

-- Spend per key and period ('total' or 'YYYY-MM', UTC), moved by the receipt writer in the
-- same transaction as the receipts, so spend is exactly as durable as the receipts.
CREATE TABLE key_spend (
    tenant_id  TEXT NOT NULL,
    key_id     TEXT NOT NULL,
    period     TEXT NOT NULL,
    cost_usd   REAL NOT NULL,
    PRIMARY KEY (tenant_id, key_id, period)
);

CREATE TABLE policies (
    id          TEXT PRIMARY KEY,
    tenant_id   TEXT NOT NULL REFERENCES tenants(id),
    name        TEXT NOT NULL,
    enabled     BIGINT NOT NULL,
    yaml        TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL
);
CREATE INDEX policies_tenant ON policies(tenant_id, created_at);

-- One row per guardrail redaction or block; never any prompt or completion text.
CREATE TABLE guardrail_events (
    id          TEXT PRIMARY KEY,
    tenant_id   TEXT NOT NULL,
    ts          TEXT NOT NULL,              -- the receipt's ts: YYYY-MM-DD HH:MM:SS.mmm UTC
    receipt_id  TEXT NOT NULL,
    actor       TEXT NOT NULL,
    model       TEXT NOT NULL,
    check_name  TEXT NOT NULL,
    result      TEXT NOT NULL,              -- REDACT | BLOCK | FLAG
    category    TEXT NOT NULL,
    direction   TEXT NOT NULL               -- request | response
);
CREATE INDEX guardrail_events_tenant_ts ON guardrail_events(tenant_id, ts, id);

-- Cache side channels (unsigned): what a hit saved.
ALTER TABLE receipts ADD COLUMN cache_result TEXT NOT NULL DEFAULT '';
ALTER TABLE receipts ADD COLUMN saved_tokens BIGINT NOT NULL DEFAULT 0;
ALTER TABLE receipts ADD COLUMN saved_usd REAL NOT NULL DEFAULT 0;
