-- The tenant log (log.md): its interior hashes as C2SP tlog-tiles, and the checkpoints published.
-- Only full tiles are stored (256 hashes, 8 KiB); a partial tile is read from what it is made of:
-- the leaves (receipts.this_hash) at level 0, the roots of the full tiles below it above.
-- Rows are written in the transaction that commits the receipts they cover; full tiles never change.
CREATE TABLE log_tiles (
    tenant_id  TEXT NOT NULL,
    level      BIGINT NOT NULL,
    idx        BIGINT NOT NULL,
    hashes     BLOB NOT NULL,            -- 256 x 32 bytes: the tile as served
    root       BLOB NOT NULL,            -- the hash of the subtree the tile spans: its entry one level up
    PRIMARY KEY (tenant_id, level, idx)
);

-- Checkpoints as published: the signed note, later its cosignatures and timestamp.
CREATE TABLE log_checkpoints (
    tenant_id     TEXT NOT NULL,
    size          BIGINT NOT NULL,
    root          TEXT NOT NULL,        -- hex
    note          TEXT NOT NULL,        -- body and the log's own signature line
    key_id        TEXT NOT NULL,
    created_at    TEXT NOT NULL,
    PRIMARY KEY (tenant_id, size)
);

-- One row: this database's install id, the default log origin prefix (tollgate-<installId>).
CREATE TABLE log_install (
    one         BIGINT PRIMARY KEY CHECK (one = 1),
    install_id  TEXT NOT NULL
);
