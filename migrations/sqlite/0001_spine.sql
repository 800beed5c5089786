-- Tenants, virtual keys and provider credentials.
-- Timestamps are RFC 3339 UTC text with milliseconds, so they sort as text on both backends.

CREATE TABLE tenants (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE,
    created_at  TEXT NOT NULL
);

CREATE TABLE api_keys (
    id           TEXT PRIMARY KEY,
    tenant_id    TEXT NOT NULL REFERENCES tenants(id),
    key_hash     TEXT NOT NULL UNIQUE,          -- lowercase hex SHA-256 of the secret
    key_hint     TEXT NOT NULL,                 -- last 4 characters, for humans
    label        TEXT NOT NULL,
    key_class    TEXT NOT NULL,
    role         TEXT NOT NULL,
    team_id      TEXT,
    budget_usd   REAL,
    spent_usd    REAL NOT NULL DEFAULT 0,
    rpm_limit    BIGINT,
    tpm_limit    BIGINT,
    created_at   TEXT NOT NULL,
    last_used_at TEXT,
    revoked_at   TEXT
);
CREATE INDEX api_keys_tenant ON api_keys(tenant_id, created_at);

CREATE TABLE provider_credentials (
    tenant_id    TEXT NOT NULL REFERENCES tenants(id),
    provider     TEXT NOT NULL,
    sealed       TEXT NOT NULL,                 -- base64(nonce || AES-256-GCM ciphertext) of the secret JSON
    key_hint     TEXT NOT NULL,
    base_url     TEXT,
    region       TEXT,
    status       TEXT NOT NULL,
    updated_at   TEXT NOT NULL,
    PRIMARY KEY (tenant_id, provider)
);
