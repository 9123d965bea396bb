-- +goose Up
-- The web UI's sessions: an opaque id in an HttpOnly cookie and a key the
-- page holds, both stored as hashes, bound to the API token that signed
-- in. Revoking the token deletes them.
CREATE TABLE web_sessions (
    hash         TEXT PRIMARY KEY,
    key_hash     TEXT NOT NULL,
    token_id     TEXT NOT NULL REFERENCES api_tokens (id),
    created_at   TIMESTAMPTZ NOT NULL,
    expires_at   TIMESTAMPTZ NOT NULL,
    last_seen_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX web_sessions_token ON web_sessions (token_id);

-- +goose Down
DROP TABLE web_sessions;
