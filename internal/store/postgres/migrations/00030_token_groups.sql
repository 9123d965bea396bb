-- +goose Up
-- A person's token keeps the groups of the sign-in that minted it (a JSON
-- array), so that the keeper can tell when the role those groups gave is
-- withdrawn (a binding removed or lowered, keeper.yml changed) and revoke
-- the token then, not when it expires. NULL: minted before the keeper kept
-- them; such a token lives until it expires.
ALTER TABLE api_tokens ADD COLUMN person_groups TEXT;

-- +goose Down
ALTER TABLE api_tokens DROP COLUMN person_groups;
