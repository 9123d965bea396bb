-- +goose Up
CREATE TABLE runs (
    id               TEXT PRIMARY KEY,
    key              TEXT UNIQUE,
    digest           TEXT NOT NULL,
    name             TEXT NOT NULL,
    scenario         TEXT NOT NULL,
    input_sealed     TEXT NOT NULL,
    input_masked     TEXT NOT NULL DEFAULT '{}',
    phase            TEXT NOT NULL CHECK (phase IN ('Pending', 'Running', 'Succeeded', 'Failed', 'Cancelled')),
    error_code       TEXT NOT NULL DEFAULT '',
    error_message    TEXT NOT NULL DEFAULT '',
    timeout_ms       BIGINT NOT NULL,
    created_by       TEXT NOT NULL,
    created_at       TIMESTAMPTZ NOT NULL,
    started_at       TIMESTAMPTZ,
    finished_at      TIMESTAMPTZ,
    outputs          TEXT NOT NULL DEFAULT '{}',
    message          TEXT NOT NULL DEFAULT '',
    state_sealed     TEXT NOT NULL DEFAULT '',
    owner            TEXT,
    heartbeat_at     TIMESTAMPTZ,
    cancel_requested BOOLEAN NOT NULL DEFAULT FALSE
);
CREATE INDEX runs_phase ON runs (phase);

CREATE TABLE run_steps (
    run_id      TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    step_index  INTEGER NOT NULL,
    name        TEXT NOT NULL,
    module      TEXT NOT NULL,
    status      TEXT NOT NULL,
    started_at  TIMESTAMPTZ,
    finished_at TIMESTAMPTZ,
    PRIMARY KEY (run_id, step_index)
);

CREATE TABLE run_targets (
    run_id        TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    step_index    INTEGER NOT NULL,
    sid           TEXT NOT NULL,
    status        TEXT NOT NULL,
    changed       BOOLEAN NOT NULL DEFAULT FALSE,
    output        TEXT NOT NULL DEFAULT 'null',
    error_code    TEXT NOT NULL DEFAULT '',
    error_message TEXT NOT NULL DEFAULT '',
    attempts      INTEGER NOT NULL DEFAULT 0,
    duration_ms   BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id, step_index, sid)
);

CREATE TABLE run_events (
    run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    seq    BIGINT NOT NULL,
    at     TIMESTAMPTZ NOT NULL,
    kind   TEXT NOT NULL,
    step   TEXT NOT NULL DEFAULT '',
    sid    TEXT NOT NULL DEFAULT '',
    data   TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (run_id, seq)
);

-- +goose Down
DROP TABLE run_events;
DROP TABLE run_targets;
DROP TABLE run_steps;
DROP TABLE runs;
