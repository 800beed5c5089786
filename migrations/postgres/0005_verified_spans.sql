-- Verified-span memo (docs/decisions.md "Verified-span memo"): for an aligned block of a
-- tenant's chain (block_start = 1 + k * block_len) whose every receipt a walk re-hashed, linked
-- and Ed25519-verified, digest = hex HMAC-SHA256 under a key derived from the master key over
-- the tenant, the block and each receipt's recomputed thisHash, stored signature and keyId.
-- A later walk that recomputes the same MAC may count the block's signatures as verified.
CREATE TABLE verified_spans (
    tenant_id    TEXT NOT NULL,
    block_start  BIGINT NOT NULL,
    block_len    BIGINT NOT NULL,
    digest       TEXT NOT NULL,
    key_ids      TEXT NOT NULL,          -- the block's distinct key ids, sorted, comma-separated
    created_at   TEXT NOT NULL,
    PRIMARY KEY (tenant_id, block_start)
);
