-- +goose Up
-- A step an approval policy holds: the run waits (shown AwaitingApproval)
-- until another person approves it, rejects it, or it expires.
CREATE TABLE run_approvals (
    run_id       TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    step_index   INTEGER NOT NULL,
    step         TEXT NOT NULL,
    module       TEXT NOT NULL,
    project      TEXT NOT NULL,
    policies     TEXT NOT NULL DEFAULT '[]',
    why          TEXT NOT NULL DEFAULT '',
    requested_at TIMESTAMP NOT NULL,
    expires_at   TIMESTAMP NOT NULL,
    status       TEXT NOT NULL,
    decided_by   TEXT NOT NULL DEFAULT '',
    decided_person TEXT NOT NULL DEFAULT '',
    decided_at   TIMESTAMP,
    reason       TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (run_id, step_index)
);
CREATE INDEX run_approvals_status ON run_approvals (status, run_id);

-- Approval policies set through the API (keeper.yml's come on top).
CREATE TABLE approval_policy (
    id          INTEGER PRIMARY KEY,
    policy      TEXT NOT NULL,
    updated_at  TIMESTAMP NOT NULL,
    updated_by  TEXT NOT NULL
);

-- +goose Down
DROP TABLE approval_policy;
DROP INDEX run_approvals_status;
DROP TABLE run_approvals;
