-- +goose Up
CREATE TABLE providers (
    name            TEXT PRIMARY KEY,
    driver          TEXT NOT NULL,
    region          TEXT NOT NULL DEFAULT '',
    credentials_ref TEXT NOT NULL DEFAULT '',
    fqdn_suffix     TEXT NOT NULL DEFAULT '',
    config          TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(config)),
    created_at      TIMESTAMP NOT NULL,
    created_by      TEXT NOT NULL
);

CREATE TABLE profiles (
    name       TEXT PRIMARY KEY,
    provider   TEXT NOT NULL REFERENCES providers (name) ON DELETE RESTRICT,
    spec       TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(spec)),
    created_at TIMESTAMP NOT NULL,
    created_by TEXT NOT NULL
);
CREATE INDEX profiles_provider ON profiles (provider);

CREATE TABLE souls (
    sid            TEXT PRIMARY KEY,
    status         TEXT NOT NULL CHECK (status IN ('pending', 'active', 'unreachable', 'destroyed')),
    address        TEXT NOT NULL DEFAULT '',
    provider       TEXT REFERENCES providers (name) ON DELETE RESTRICT,
    vm_id          TEXT NOT NULL DEFAULT '',
    primary_ip     TEXT NOT NULL DEFAULT '',
    attributes     TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(attributes)),
    connection     TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(connection)),
    created_by_aid TEXT,
    created_at     TIMESTAMP NOT NULL,
    updated_at     TIMESTAMP NOT NULL
);
CREATE INDEX souls_provider ON souls (provider);

CREATE TABLE soul_seeds (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    sid      TEXT NOT NULL REFERENCES souls (sid) ON DELETE CASCADE,
    scenario TEXT NOT NULL,
    input    TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(input)),
    status   TEXT NOT NULL CHECK (status IN ('active', 'orphaned'))
);
CREATE INDEX soul_seeds_sid ON soul_seeds (sid);

CREATE TABLE bootstrap_tokens (
    id         TEXT PRIMARY KEY,
    sid        TEXT NOT NULL REFERENCES souls (sid) ON DELETE CASCADE,
    hash       TEXT NOT NULL UNIQUE,
    expires_at TIMESTAMP,
    status     TEXT NOT NULL CHECK (status IN ('issued', 'used', 'burned'))
);
CREATE INDEX bootstrap_tokens_sid ON bootstrap_tokens (sid);

CREATE TABLE api_tokens (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    role       TEXT NOT NULL,
    hash       TEXT NOT NULL UNIQUE,
    created_by TEXT NOT NULL,
    created_at TIMESTAMP NOT NULL,
    expires_at TIMESTAMP,
    revoked_at TIMESTAMP
);

CREATE TABLE audit_events (
    seq       INTEGER PRIMARY KEY,
    at        TIMESTAMP NOT NULL,
    actor_aid TEXT NOT NULL,
    action    TEXT NOT NULL,
    object    TEXT NOT NULL,
    payload   TEXT NOT NULL,
    prev_hash TEXT NOT NULL,
    hash      TEXT NOT NULL
);

-- The chain head: the last sequence number and hash. Every mutation locks it,
-- so events are appended one at a time, and the verifier compares the log's
-- tip with it to notice rows deleted from the end.
CREATE TABLE audit_head (
    id   INTEGER PRIMARY KEY CHECK (id = 1),
    seq  INTEGER NOT NULL,
    hash TEXT NOT NULL
);
INSERT INTO audit_head (id, seq, hash) VALUES (1, 0, '0000000000000000000000000000000000000000000000000000000000000000');

-- +goose Down
DROP TABLE audit_head;
DROP TABLE audit_events;
DROP TABLE api_tokens;
DROP TABLE bootstrap_tokens;
DROP TABLE soul_seeds;
DROP TABLE souls;
DROP TABLE profiles;
DROP TABLE providers;
