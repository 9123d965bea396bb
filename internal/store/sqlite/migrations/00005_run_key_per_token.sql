-- +goose Up
-- A re-run key belongs to the token that created the run: the same key
-- from another token names another run. SQLite cannot drop a column's
-- UNIQUE constraint, so runs is rebuilt without it. With foreign keys on,
-- dropping runs would cascade-delete its steps, targets and events, so
-- those are copied aside and their tables dropped first, then recreated as
-- 00002 made them. INSERT … SELECT * fails loudly if an earlier migration
-- changed a column list this one does not know.
CREATE TABLE runs_new (
    id               TEXT PRIMARY KEY,
    key              TEXT,
    digest           TEXT NOT NULL,
    name             TEXT NOT NULL,
    scenario         TEXT NOT NULL,
    input_sealed     TEXT NOT NULL,
    input_masked     TEXT NOT NULL DEFAULT '{}',
    phase            TEXT NOT NULL CHECK (phase IN ('Pending', 'Running', 'Succeeded', 'Failed', 'Cancelled')),
    error_code       TEXT NOT NULL DEFAULT '',
    error_message    TEXT NOT NULL DEFAULT '',
    timeout_ms       INTEGER NOT NULL,
    created_by       TEXT NOT NULL,
    created_at       TIMESTAMP NOT NULL,
    started_at       TIMESTAMP,
    finished_at      TIMESTAMP,
    outputs          TEXT NOT NULL DEFAULT '{}',
    message          TEXT NOT NULL DEFAULT '',
    state_sealed     TEXT NOT NULL DEFAULT '',
    owner            TEXT,
    heartbeat_at     TIMESTAMP,
    cancel_requested INTEGER NOT NULL DEFAULT 0
);
INSERT INTO runs_new SELECT * FROM runs;
CREATE TABLE run_steps_copy AS SELECT * FROM run_steps;
CREATE TABLE run_targets_copy AS SELECT * FROM run_targets;
CREATE TABLE run_events_copy AS SELECT * FROM run_events;
DROP TABLE run_events;
DROP TABLE run_targets;
DROP TABLE run_steps;
DROP TABLE runs;
ALTER TABLE runs_new RENAME TO runs;
CREATE INDEX runs_phase ON runs (phase);
CREATE UNIQUE INDEX runs_creator_key ON runs (created_by, key);

CREATE TABLE run_steps (
    run_id      TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    step_index  INTEGER NOT NULL,
    name        TEXT NOT NULL,
    module      TEXT NOT NULL,
    status      TEXT NOT NULL,
    started_at  TIMESTAMP,
    finished_at TIMESTAMP,
    PRIMARY KEY (run_id, step_index)
);
INSERT INTO run_steps SELECT * FROM run_steps_copy;
DROP TABLE run_steps_copy;

CREATE TABLE run_targets (
    run_id        TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    step_index    INTEGER NOT NULL,
    sid           TEXT NOT NULL,
    status        TEXT NOT NULL,
    changed       INTEGER NOT NULL DEFAULT 0,
    output        TEXT NOT NULL DEFAULT 'null',
    error_code    TEXT NOT NULL DEFAULT '',
    error_message TEXT NOT NULL DEFAULT '',
    attempts      INTEGER NOT NULL DEFAULT 0,
    duration_ms   INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id, step_index, sid)
);
INSERT INTO run_targets SELECT * FROM run_targets_copy;
DROP TABLE run_targets_copy;

CREATE TABLE run_events (
    run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    seq    INTEGER NOT NULL,
    at     TIMESTAMP NOT NULL,
    kind   TEXT NOT NULL,
    step   TEXT NOT NULL DEFAULT '',
    sid    TEXT NOT NULL DEFAULT '',
    data   TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (run_id, seq)
);
INSERT INTO run_events SELECT * FROM run_events_copy;
DROP TABLE run_events_copy;

-- +goose Down
-- Only possible while no key is used by two tokens.
DROP INDEX runs_creator_key;
CREATE UNIQUE INDEX runs_key ON runs (key);
