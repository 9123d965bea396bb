-- +goose Up
-- The keeper deployment: one row naming the registry, made once by this
-- migration and never changed, so every keeper on this database reports
-- the same id. Cloud drivers tag the VMs they make with it
-- (soulstack.keeper) and refuse to destroy VMs without it.
CREATE TABLE keeper_deployment (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    deployment_id TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
INSERT INTO keeper_deployment (id, deployment_id)
    VALUES (1, 'kd-' || substr(md5(random()::text || clock_timestamp()::text || pg_backend_pid()::text), 1, 24));

-- +goose Down
DROP TABLE keeper_deployment;
