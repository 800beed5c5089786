-- Issue 5: tenant compliance packs and every pack set ever in force, so a receipt's
-- `receiptPackVersion` stamp stays resolvable after a pack changes.

-- Raw YAML by content hash (sha256 hex of the exact bytes); never updated or deleted.
-- tenant_id '' holds the baseline packs of the binaries that ran against this database.
CREATE TABLE pack_blobs (
    tenant_id   TEXT NOT NULL,
    pack_hash   TEXT NOT NULL,
    yaml        TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    PRIMARY KEY (tenant_id, pack_hash)
);

-- The tenant packs in force now (beside, or in place of, the baseline pack of that framework).
CREATE TABLE compliance_packs (
    tenant_id   TEXT NOT NULL,
    framework   TEXT NOT NULL,
    pack_hash   TEXT NOT NULL,
    updated_at  TEXT NOT NULL,
    PRIMARY KEY (tenant_id, framework)
);

-- Pack sets by version (`ps-` + 12 hex): members is a JSON array of {framework, packHash, source}.
-- tenant_id '' is the baseline-only set.
CREATE TABLE pack_sets (
    tenant_id   TEXT NOT NULL,
    version     TEXT NOT NULL,
    members     TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    PRIMARY KEY (tenant_id, version)
);
