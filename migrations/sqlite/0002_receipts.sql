-- Receipts, per-tenant chain heads and the signing-key registry (receipts.md).
-- The signed members are stored as they were signed, so a chain walk can re-derive every hash.

CREATE TABLE receipts (
    tenant_id             TEXT NOT NULL,
    seq                   BIGINT NOT NULL,
    receipt_id            TEXT NOT NULL UNIQUE,
    v                     BIGINT NOT NULL,
    request_id            TEXT NOT NULL,
    actor                 TEXT NOT NULL,
    provider              TEXT NOT NULL,
    model                 TEXT NOT NULL,
    prompt_tokens         BIGINT NOT NULL,
    completion_tokens     BIGINT NOT NULL,
    cost_usd              REAL NOT NULL,
    checks                TEXT NOT NULL,          -- JSON array of {name, result}, in order
    check_names           TEXT NOT NULL,          -- ",NAME1,NAME2," for the `check` filter
    upstream_status       TEXT NOT NULL,
    ts                    TEXT NOT NULL,          -- YYYY-MM-DD HH:MM:SS.mmm UTC
    prev_hash             TEXT NOT NULL,
    this_hash             TEXT NOT NULL,
    signature             TEXT NOT NULL,
    key_id                TEXT NOT NULL,
    -- unsigned side channels
    kind                  TEXT NOT NULL DEFAULT 'model_call',
    receipt_pack_version  TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (tenant_id, seq)
);
CREATE INDEX receipts_tenant_ts ON receipts(tenant_id, ts);

CREATE TABLE chain_heads (
    tenant_id  TEXT PRIMARY KEY,
    seq        BIGINT NOT NULL,
    this_hash  TEXT NOT NULL
);

CREATE TABLE signing_keys (
    key_id      TEXT PRIMARY KEY,
    algorithm   TEXT NOT NULL,
    public_key  TEXT NOT NULL,                   -- base64 of the raw 32-byte Ed25519 public key
    created_at  TEXT NOT NULL,
    retired_at  TEXT
);
