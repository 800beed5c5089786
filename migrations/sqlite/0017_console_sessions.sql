-- The web console's sessions (issue 43, docs/console.md): one row per signed-in browser.
-- `id_hash` is the SHA-256 (hex) of the 256-bit session id the cookie carries: a copy of this
-- table lets no one sign in. A key session names its key by the key's own digest (`key_hash`,
-- as `api_keys.key_hash`), so a revoked key ends its sessions; the key itself is kept only
-- encrypted at rest (`key_sealed`, for a prompt run that goes through the gateway with it).
-- A single sign-on session has no key: `key_hash` and `key_sealed` are NULL, `subject` is the
-- identity provider's `sub`.
CREATE TABLE console_sessions (
    id_hash     TEXT PRIMARY KEY,
    tenant_id   TEXT NOT NULL,
    key_hash    TEXT,
    key_sealed  TEXT,
    subject     TEXT NOT NULL,
    role        TEXT NOT NULL,
    csrf        TEXT NOT NULL,
    created_ms  BIGINT NOT NULL,
    seen_ms     BIGINT NOT NULL
);
CREATE INDEX console_sessions_key ON console_sessions (key_hash);
