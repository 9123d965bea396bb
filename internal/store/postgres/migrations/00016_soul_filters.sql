-- +goose Up
-- Indexes for GET /v1/souls?status=&provider=&label= at 10,000 souls:
-- status and provider walk the matching souls in SID order (the list's
-- order), so a page stops after limit rows; an attribute filter
-- (attributes @> {"key":"value"}) uses the GIN index.
CREATE INDEX souls_status_sid ON souls (status, sid);
CREATE INDEX souls_provider_sid ON souls (provider, sid);
CREATE INDEX souls_attributes ON souls USING GIN (attributes jsonb_path_ops);

-- +goose Down
DROP INDEX souls_attributes;
DROP INDEX souls_provider_sid;
DROP INDEX souls_status_sid;
