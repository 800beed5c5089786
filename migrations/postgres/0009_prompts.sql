-- Prompts and their versions (issue 21). `latest_version` is bumped in the transaction that
-- inserts a version, so concurrent creates get 1, 2, 3, ... with no gap and no duplicate.
CREATE TABLE prompts (
    id              TEXT PRIMARY KEY,
    tenant_id       TEXT NOT NULL REFERENCES tenants(id),
    name            TEXT NOT NULL,
    description     TEXT NOT NULL,
    labels          TEXT NOT NULL,
    latest_version  BIGINT NOT NULL,
    created_at      TEXT NOT NULL
);
CREATE INDEX prompts_tenant ON prompts(tenant_id, id);

CREATE TABLE prompt_versions (
    id          TEXT PRIMARY KEY,
    tenant_id   TEXT NOT NULL REFERENCES tenants(id),
    prompt_id   TEXT NOT NULL REFERENCES prompts(id),
    version     BIGINT NOT NULL,
    content     TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    UNIQUE (prompt_id, version)
);
