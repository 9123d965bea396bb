-- +goose Up
-- A cloud create request, recorded before the driver is called, so that
-- VMs a crash left behind are findable by their request tag.
CREATE TABLE cloud_requests (
    request_id  TEXT PRIMARY KEY,
    run_id      TEXT NOT NULL,
    step        TEXT NOT NULL,
    provider    TEXT NOT NULL,
    count       INTEGER NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('requested', 'created', 'failed')),
    vm_ids      TEXT NOT NULL DEFAULT '[]',
    error       TEXT NOT NULL DEFAULT '',
    created_at  TIMESTAMP NOT NULL,
    finished_at TIMESTAMP
);
CREATE INDEX cloud_requests_provider ON cloud_requests (provider);
CREATE INDEX souls_vm_id ON souls (provider, vm_id);

-- +goose Down
DROP INDEX souls_vm_id;
DROP TABLE cloud_requests;
