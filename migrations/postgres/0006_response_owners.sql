-- OpenAI Responses (docs/decisions.md "OpenAI Responses API"): which tenant created a stored
-- response, and each output item of it (items can be named again as input). Written when the
-- create's answer carries the ids; read before any call that names one, so another tenant's
-- ids answer 404 without reaching the provider. First writer wins: ids are the provider's.
-- A deleted response keeps its row: it was that tenant's (the provider answers 404 for it).
CREATE TABLE response_owners (
    id          TEXT PRIMARY KEY,        -- `resp_…`, or an output item's id (`msg_…`, `fc_…`, `rs_…`)
    tenant_id   TEXT NOT NULL REFERENCES tenants(id),
    created_at  TEXT NOT NULL
);
