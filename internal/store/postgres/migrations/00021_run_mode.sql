-- +goose Up
-- A run's mode: apply (what every run was before) or check, which changes
-- nothing and says per target what apply would change. A check target
-- keeps why it is unknown and what would change.
ALTER TABLE runs ADD COLUMN mode TEXT NOT NULL DEFAULT 'apply';
ALTER TABLE run_targets ADD COLUMN unknown TEXT NOT NULL DEFAULT '';
ALTER TABLE run_targets ADD COLUMN changes TEXT NOT NULL DEFAULT 'null';

-- +goose Down
ALTER TABLE run_targets DROP COLUMN changes;
ALTER TABLE run_targets DROP COLUMN unknown;
ALTER TABLE runs DROP COLUMN mode;
