-- +goose Up
-- A token the keeper minted for a person who signed in with OIDC names the
-- person: the issuer and subject of their ID token and a display name.
ALTER TABLE api_tokens ADD COLUMN person_issuer TEXT NOT NULL DEFAULT '';
ALTER TABLE api_tokens ADD COLUMN person_subject TEXT NOT NULL DEFAULT '';
ALTER TABLE api_tokens ADD COLUMN person_name TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE api_tokens DROP COLUMN person_name;
ALTER TABLE api_tokens DROP COLUMN person_subject;
ALTER TABLE api_tokens DROP COLUMN person_issuer;
