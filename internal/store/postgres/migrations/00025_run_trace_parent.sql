-- +goose Up
-- The W3C trace context of the request that made a run: an execution that
-- recovers the run (another keeper, after a crash) continues its trace.
ALTER TABLE runs ADD COLUMN trace_parent TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE runs DROP COLUMN trace_parent;
