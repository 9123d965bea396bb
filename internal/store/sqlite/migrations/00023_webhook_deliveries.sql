-- +goose Up
-- Outgoing webhook deliveries: one row per notification and event, its
-- attempts and outcome (the queue job carries the body; this is the log
-- the API shows).
CREATE TABLE webhook_deliveries (
    id            TEXT PRIMARY KEY,
    notification  TEXT NOT NULL,
    event         TEXT NOT NULL,
    object        TEXT NOT NULL DEFAULT '',
    status        TEXT NOT NULL,
    attempts      INTEGER NOT NULL DEFAULT 0,
    last_code     INTEGER NOT NULL DEFAULT 0,
    last_error    TEXT NOT NULL DEFAULT '',
    created_at    TIMESTAMP NOT NULL,
    updated_at    TIMESTAMP NOT NULL
);
CREATE INDEX webhook_deliveries_created ON webhook_deliveries (created_at);

-- +goose Down
DROP TABLE webhook_deliveries;
