-- +goose Up
-- Indexes for GET /v1/souls?status=&provider= at 10,000 souls: each walks
-- the matching souls in SID order (the list's order), so a page stops
-- after limit rows. An attribute filter (?label=) scans json_each.
CREATE INDEX souls_status_sid ON souls (status, sid);
CREATE INDEX souls_provider_sid ON souls (provider, sid);

-- +goose Down
DROP INDEX souls_provider_sid;
DROP INDEX souls_status_sid;
