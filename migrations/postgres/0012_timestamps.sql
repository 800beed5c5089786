-- RFC 3161 timestamps of published checkpoints (log.md §6): the TSA's answer, kept as received,
-- for the checkpoint (tenant_id, size) whose note body it stamps. At most one per checkpoint.
CREATE TABLE log_timestamps (
    tenant_id   TEXT NOT NULL,
    size        BIGINT NOT NULL,
    gen_time    TEXT NOT NULL,        -- the token's genTime, RFC 3339 UTC
    tsr         TEXT NOT NULL,        -- base64 of the DER TimeStampResp as received
    tsa_url     TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    PRIMARY KEY (tenant_id, size)
);
