-- Witness cosignatures of published checkpoints (docs/log.md §5), served after the log's own
-- signature line, and how far each witness has cosigned each tenant's log.
CREATE TABLE log_cosignatures (
    tenant_id   TEXT NOT NULL,
    size        BIGINT NOT NULL,
    witness     TEXT NOT NULL,
    line        TEXT NOT NULL,              -- "— <witness> <base64>", verified before it is kept
    PRIMARY KEY (tenant_id, size, witness)
);

CREATE TABLE log_witness_state (
    tenant_id    TEXT NOT NULL,
    witness      TEXT NOT NULL,
    size         BIGINT NOT NULL,            -- the newest checkpoint size it cosigned
    cosigned_at  TEXT NOT NULL,
    PRIMARY KEY (tenant_id, witness)
);
