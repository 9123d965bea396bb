-- +goose Up
-- A token either has a built-in role (permissions empty: the role's) or
-- the role 'custom' with an explicit, comma-separated permission list.
ALTER TABLE api_tokens ADD COLUMN permissions TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE api_tokens DROP COLUMN permissions;
