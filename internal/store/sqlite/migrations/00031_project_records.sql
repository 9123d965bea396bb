-- +goose Up
-- The project a webhook delivery's event is about ('' for keeper-wide
-- events and for every delivery logged before, which keeper-wide readers
-- alone see): a project's token lists its project's deliveries alone.
ALTER TABLE webhook_deliveries ADD COLUMN project TEXT NOT NULL DEFAULT '';
CREATE INDEX webhook_deliveries_project ON webhook_deliveries (project, id);

-- A deleted project's name is never given to a new project: its finished
-- runs, destroyed souls, revoked tokens, audit events and deliveries keep
-- the name, and a new project of that name must not read them.
CREATE TABLE retired_projects (
    name        TEXT PRIMARY KEY,
    deleted_at  TIMESTAMP NOT NULL,
    deleted_by  TEXT NOT NULL
);
-- The projects deleted before this table existed, from the audit log.
INSERT INTO retired_projects (name, deleted_at, deleted_by)
SELECT substr(object, 9), MAX(at), 'migration 00031' FROM audit_events
WHERE action = 'project.deleted' AND object LIKE 'project/%' AND substr(object, 9) NOT IN (SELECT name FROM projects)
GROUP BY substr(object, 9);

-- +goose Down
DROP TABLE retired_projects;
DROP INDEX webhook_deliveries_project;
ALTER TABLE webhook_deliveries DROP COLUMN project;
