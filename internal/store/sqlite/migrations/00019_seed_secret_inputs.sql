-- +goose Up
-- The inputs a seed's scenario declares secret (or feeds to a secret
-- param): their values are sealed at rest and masked in every answer, as
-- those under secret-looking keys are.
ALTER TABLE soul_seeds ADD COLUMN secret_inputs TEXT NOT NULL DEFAULT '[]';

-- +goose Down
ALTER TABLE soul_seeds DROP COLUMN secret_inputs;
