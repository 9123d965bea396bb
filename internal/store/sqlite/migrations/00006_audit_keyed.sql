-- +goose Up
-- Audit rows are keyed from here on: each row's hash is an HMAC under an
-- audit key that is not in the database. keyed_from is the first sequence
-- number written that way; the rows before it (written by an older keeper)
-- keep their plain SHA-256 and are verified and reported as legacy rows.
-- A fresh database has none, so keyed_from is 1.
ALTER TABLE audit_head ADD COLUMN keyed_from INTEGER NOT NULL DEFAULT 1;
UPDATE audit_head SET keyed_from = seq + 1;

-- +goose Down
ALTER TABLE audit_head DROP COLUMN keyed_from;
