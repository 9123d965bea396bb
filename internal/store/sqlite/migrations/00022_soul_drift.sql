-- +goose Up
-- Drift: per soul and seed, what the last check run of the seed found
-- (checking, in_sync, drifted, unknown, unreachable), whether a drift is
-- corrective (the seed's last apply succeeded: the soul changed behind the
-- keeper's back) or pending (the seed was never applied), and an
-- acknowledgement that silences it until it expires or the state changes.
CREATE TABLE soul_drift (
    sid         TEXT NOT NULL,
    seed_id     INTEGER NOT NULL,
    state       TEXT NOT NULL,
    kind        TEXT NOT NULL DEFAULT '',
    run_id      TEXT NOT NULL DEFAULT '',
    reason      TEXT NOT NULL DEFAULT '',
    checked_at  TIMESTAMP,
    changed_at  TIMESTAMP,
    ack_until   TIMESTAMP,
    ack_reason  TEXT NOT NULL DEFAULT '',
    ack_by      TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (sid, seed_id)
);
CREATE INDEX soul_drift_state ON soul_drift (state);

-- +goose Down
DROP TABLE soul_drift;
