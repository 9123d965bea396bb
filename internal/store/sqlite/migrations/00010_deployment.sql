-- +goose Up
-- The keeper deployment: one row naming the registry, made once by this
-- migration and never changed, so every keeper on this database reports
-- the same id. Cloud drivers tag the VMs they make with it
-- (soulstack.keeper) and refuse to destroy VMs without it.
CREATE TABLE keeper_deployment (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    deployment_id TEXT NOT NULL,
    created_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP
);
INSERT INTO keeper_deployment (id, deployment_id) VALUES (1, 'kd-' || lower(hex(randomblob(12))));

-- +goose Down
DROP TABLE keeper_deployment;
