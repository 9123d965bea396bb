-- +goose Up
-- A joined soul's identity: the serial (lowercase hex) and expiry of the
-- client certificate it holds now, and when it joined. Renewal replaces
-- the serial; destroy clears it, which revokes the certificate.
ALTER TABLE souls ADD COLUMN cert_serial TEXT NOT NULL DEFAULT '';
ALTER TABLE souls ADD COLUMN cert_not_after TIMESTAMP;
ALTER TABLE souls ADD COLUMN joined_at TIMESTAMP;
-- Who added a seed (its runs are created by them) and when.
ALTER TABLE soul_seeds ADD COLUMN created_by TEXT NOT NULL DEFAULT '';
ALTER TABLE soul_seeds ADD COLUMN created_at TIMESTAMP;

-- +goose Down
ALTER TABLE soul_seeds DROP COLUMN created_at;
ALTER TABLE soul_seeds DROP COLUMN created_by;
ALTER TABLE souls DROP COLUMN joined_at;
ALTER TABLE souls DROP COLUMN cert_not_after;
ALTER TABLE souls DROP COLUMN cert_serial;
