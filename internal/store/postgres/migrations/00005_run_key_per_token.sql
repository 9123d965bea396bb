-- +goose Up
-- A re-run key belongs to the token that created the run: the same key
-- from another token names another run.
ALTER TABLE runs DROP CONSTRAINT runs_key_key;
CREATE UNIQUE INDEX runs_creator_key ON runs (created_by, key);

-- +goose Down
-- Only possible while no key is used by two tokens.
DROP INDEX runs_creator_key;
ALTER TABLE runs ADD CONSTRAINT runs_key_key UNIQUE (key);
