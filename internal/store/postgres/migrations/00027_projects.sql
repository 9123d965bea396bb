-- +goose Up
-- Projects: the teams a keeper serves. The default project holds what the
-- keeper held before projects (its objects gain a project as isolation
-- arrives); it always exists.
CREATE TABLE projects (
    name         TEXT PRIMARY KEY,
    description  TEXT NOT NULL DEFAULT '',
    created_at   TIMESTAMP NOT NULL,
    created_by   TEXT NOT NULL
);
INSERT INTO projects (name, description, created_at, created_by) VALUES ('default', 'What the keeper held before projects.', CURRENT_TIMESTAMP, 'keeper');

-- +goose Down
DROP TABLE projects;
