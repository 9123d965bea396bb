-- +goose Up
-- A soul's last contact: last_seen_at is when a command last ran on it
-- (NULL until the first one), last_error why the step that found it
-- unreachable could not reach it (empty while it is reachable).
ALTER TABLE souls ADD COLUMN last_seen_at TIMESTAMPTZ;
ALTER TABLE souls ADD COLUMN last_error TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE souls DROP COLUMN last_error;
ALTER TABLE souls DROP COLUMN last_seen_at;
