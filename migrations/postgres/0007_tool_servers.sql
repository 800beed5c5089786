-- MCP tool servers of a tenant (issue 20): `POST /mcp/{name}` reaches `url` with the headers
-- sealed in `sealed_headers` (base64(nonce || AES-256-GCM ciphertext) of a JSON object, bound
-- to tenant and name like provider credentials). `header_names` lists their names, never values.
CREATE TABLE tool_servers (
    tenant_id       TEXT NOT NULL REFERENCES tenants(id),
    name            TEXT NOT NULL,
    url             TEXT NOT NULL,
    sealed_headers  TEXT NOT NULL,
    header_names    TEXT NOT NULL,       -- comma-separated, lower case
    created_at      TEXT NOT NULL,
    PRIMARY KEY (tenant_id, name)
);
