-- Routes, fallbacks and named credentials (docs/decisions/routes.md).

-- Credentials other than `default` (which stays in provider_credentials). The secret is
-- encrypted with `tenant/provider/name` as associated data.
CREATE TABLE provider_named_credentials (
    tenant_id    TEXT NOT NULL REFERENCES tenants(id),
    provider     TEXT NOT NULL,
    name         TEXT NOT NULL,
    sealed       TEXT NOT NULL,
    key_hint     TEXT NOT NULL,
    base_url     TEXT,
    region       TEXT,
    status       TEXT NOT NULL,
    updated_at   TEXT NOT NULL,
    PRIMARY KEY (tenant_id, provider, name)
);

-- A tenant's model routes: the route's JSON as PUT /v1/routes/{model} took it.
CREATE TABLE model_routes (
    tenant_id    TEXT NOT NULL REFERENCES tenants(id),
    model        TEXT NOT NULL,
    spec         TEXT NOT NULL,
    updated_at   TEXT NOT NULL,
    PRIMARY KEY (tenant_id, model)
);

-- Every upstream attempt of a routed request, beside its receipt (not signed), written in the
-- receipt's own transaction.
CREATE TABLE receipt_attempts (
    receipt_id   TEXT NOT NULL,
    n            BIGINT NOT NULL,
    tenant_id    TEXT NOT NULL,
    provider     TEXT NOT NULL,
    credential   TEXT NOT NULL,
    model        TEXT NOT NULL,
    status       BIGINT NOT NULL,
    outcome      TEXT NOT NULL,
    ms           BIGINT NOT NULL,
    PRIMARY KEY (receipt_id, n)
);
