-- Outbound webhooks (issue 21): endpoints, what each subscribes to, and the durable outbox.
--
-- An event is fanned out into `webhook_deliveries` (one row per subscribed endpoint) by the same
-- transaction as the change that caused it; the background sender claims due rows (a lease, plus
-- FOR UPDATE SKIP LOCKED on PostgreSQL), POSTs them and records the outcome. Deleting an
-- endpoint deletes its subscriptions and its undelivered rows: nothing more is sent to it.
CREATE TABLE webhook_endpoints (
    id             TEXT PRIMARY KEY,
    tenant_id      TEXT NOT NULL REFERENCES tenants(id),
    url            TEXT NOT NULL,
    events         TEXT NOT NULL,          -- JSON array of event names, as created
    secret_sealed  TEXT NOT NULL,          -- AES-256-GCM (master key) of the signing secret
    created_at     TEXT NOT NULL
);
CREATE INDEX webhook_endpoints_tenant ON webhook_endpoints(tenant_id, id);

CREATE TABLE webhook_subscriptions (
    tenant_id    TEXT NOT NULL,
    event        TEXT NOT NULL,
    endpoint_id  TEXT NOT NULL REFERENCES webhook_endpoints(id) ON DELETE CASCADE,
    PRIMARY KEY (tenant_id, event, endpoint_id)
);

CREATE TABLE webhook_deliveries (
    event_id         TEXT NOT NULL,        -- the `webhook-id` header: the same on every attempt
    endpoint_id      TEXT NOT NULL REFERENCES webhook_endpoints(id) ON DELETE CASCADE,
    tenant_id        TEXT NOT NULL,
    event_type       TEXT NOT NULL,
    payload          TEXT NOT NULL,        -- the exact body sent: {type, timestamp, data}
    status           TEXT NOT NULL,        -- pending | delivered | failed (gave up)
    attempts         BIGINT NOT NULL DEFAULT 0,
    next_attempt_ms  BIGINT NOT NULL,      -- unix ms when it is due
    lease_until_ms   BIGINT NOT NULL DEFAULT 0,
    last_status      BIGINT,
    last_error       TEXT,
    created_ms       BIGINT NOT NULL,
    created_at       TEXT NOT NULL,
    delivered_at     TEXT,
    PRIMARY KEY (event_id, endpoint_id)
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries(status, next_attempt_ms);
