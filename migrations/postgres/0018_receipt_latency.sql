-- A request's latency beside its receipt (not signed; docs/decisions/receipts.md): microseconds
-- from the request reaching the gateway to the end of its answer, as the receipt was drafted.
-- NULL when unknown: receipts written before this column, `admin` receipts, and records of an
-- older receipt journal replayed after an upgrade. `GET /v1/latency` reads it over a tenant's
-- period through receipts_tenant_ts (no index of its own: an append adds nothing to maintain).
ALTER TABLE receipts ADD COLUMN latency_us BIGINT;
