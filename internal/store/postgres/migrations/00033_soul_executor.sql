-- +goose Up
-- How the keeper last ran commands on the soul: "agent", "ssh: executor"
-- (soul exec --stdio over SSH) or "ssh: shell (<why>)"; empty until a
-- command ran. Written only when it changes.
ALTER TABLE souls ADD COLUMN executor TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE souls DROP COLUMN executor;
