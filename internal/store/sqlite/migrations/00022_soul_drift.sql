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
    -- The apply run a seed with remediate: auto started for this drift
    -- episode (at most one per episode).
    remediation_run_id TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (sid, seed_id)
);
-- What a seed does when a check finds it drifted: manual (report it) or
-- auto (start an apply run of the seed as its creator, once per episode).
ALTER TABLE soul_seeds ADD COLUMN remediate TEXT NOT NULL DEFAULT 'manual';
-- A seed's own drift schedule (0: the keeper-wide drift.every).
ALTER TABLE soul_seeds ADD COLUMN drift_every_ms BIGINT NOT NULL DEFAULT 0;
CREATE INDEX soul_drift_state ON soul_drift (state);

-- +goose Down
ALTER TABLE soul_seeds DROP COLUMN drift_every_ms;
ALTER TABLE soul_seeds DROP COLUMN remediate;
DROP TABLE soul_drift;
