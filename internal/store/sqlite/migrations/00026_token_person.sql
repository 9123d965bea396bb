-- +goose Up
-- A token the keeper minted for a person who signed in with OIDC names the
-- person: the issuer and subject of their ID token and a display name.
ALTER TABLE api_tokens ADD COLUMN person_issuer TEXT NOT NULL DEFAULT '';
ALTER TABLE api_tokens ADD COLUMN person_subject TEXT NOT NULL DEFAULT '';
ALTER TABLE api_tokens ADD COLUMN person_name TEXT NOT NULL DEFAULT '';

-- A soulctl login's one-time code: what the keeper learned at the OIDC
-- callback, sealed, until soulctl exchanges the code (with its PKCE
-- verifier) for the person's token; a code is taken once.
CREATE TABLE oidc_codes (
    hash        TEXT PRIMARY KEY,
    sealed      TEXT NOT NULL,
    expires_at  TIMESTAMP NOT NULL
);

-- +goose Down
DROP TABLE oidc_codes;
ALTER TABLE api_tokens DROP COLUMN person_name;
ALTER TABLE api_tokens DROP COLUMN person_subject;
ALTER TABLE api_tokens DROP COLUMN person_issuer;
