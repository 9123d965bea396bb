-- +goose Up
-- Keeper liveness is one heartbeat row per keeper: a run is held by its
-- owner while the owner's row is fresh, so that the database write rate
-- does not grow with the runs in flight and a dead keeper's runs are all
-- taken over together.
CREATE TABLE keepers (
    id            TEXT PRIMARY KEY,
    started_at    TIMESTAMP NOT NULL,
    heartbeat_at  TIMESTAMP NOT NULL
);

-- Each claim of a run is one execution with its own lease epoch; the
-- souls refuse commands of an older epoch than one they have seen.
ALTER TABLE runs ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0;
CREATE INDEX runs_owner ON runs (owner);

-- The write-ahead record of every soul-side command: stored before the
-- command is sent, so that a resumed run knows what may be running.
CREATE TABLE run_commands (
    run_id      TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    id          TEXT NOT NULL,
    step_index  INTEGER NOT NULL,
    sid         TEXT NOT NULL,
    attempt     INTEGER NOT NULL,
    n           INTEGER NOT NULL,
    epoch       INTEGER NOT NULL,
    digest      TEXT NOT NULL,
    transport   TEXT NOT NULL,
    sent_at     TIMESTAMP NOT NULL,
    PRIMARY KEY (run_id, id)
);

-- +goose Down
DROP TABLE run_commands;
DROP INDEX runs_owner;
ALTER TABLE runs DROP COLUMN epoch;
DROP TABLE keepers;
