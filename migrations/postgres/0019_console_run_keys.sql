-- A single sign-on console session's own virtual key (issue 43, docs/decisions/console.md): made
-- through `POST /v1/keys` the first time the session runs a prompt in the playground (a run goes
-- through the gateway, which needs a key), revoked through `DELETE /v1/keys/{id}` when the session
-- ends. `run_key_id` is the key's id; `run_key_sealed` the key itself, encrypted with the master
-- key (as `key_sealed`). Both NULL until the first run, and always NULL for a key session.
ALTER TABLE console_sessions ADD COLUMN run_key_id TEXT;
ALTER TABLE console_sessions ADD COLUMN run_key_sealed TEXT;
