-- +goose Up
-- Every registry object and run belongs to a project; what the keeper held
-- before projects belongs to the default one. A token belongs to one
-- project, or to none: keeper-wide (every token made before projects).
ALTER TABLE providers ADD COLUMN project TEXT NOT NULL DEFAULT 'default';
ALTER TABLE profiles ADD COLUMN project TEXT NOT NULL DEFAULT 'default';
ALTER TABLE souls ADD COLUMN project TEXT NOT NULL DEFAULT 'default';
ALTER TABLE runs ADD COLUMN project TEXT NOT NULL DEFAULT 'default';
ALTER TABLE api_tokens ADD COLUMN project TEXT NOT NULL DEFAULT '';
-- The project an audit event is about, for who may read it ('' for
-- keeper-wide events and for every event written before projects, which
-- keeper-wide readers alone see). New events also carry it in their
-- hashed payload.
ALTER TABLE audit_events ADD COLUMN project TEXT NOT NULL DEFAULT '';
CREATE INDEX providers_project ON providers (project, name);
CREATE INDEX profiles_project ON profiles (project, name);
CREATE INDEX souls_project ON souls (project, sid);
CREATE INDEX runs_project ON runs (project, id);
CREATE INDEX audit_events_project ON audit_events (project, seq);

-- A project's quotas: 0 is no limit.
ALTER TABLE projects ADD COLUMN quota_vms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE projects ADD COLUMN quota_vcpus INTEGER NOT NULL DEFAULT 0;
ALTER TABLE projects ADD COLUMN quota_memory_mb INTEGER NOT NULL DEFAULT 0;
ALTER TABLE projects ADD COLUMN quota_runs INTEGER NOT NULL DEFAULT 0;

-- What a VM takes of its project's quota, recorded with the create
-- request (counted while it is in flight) and then with its soul.
ALTER TABLE cloud_requests ADD COLUMN project TEXT NOT NULL DEFAULT 'default';
ALTER TABLE cloud_requests ADD COLUMN vcpus INTEGER NOT NULL DEFAULT 0;
ALTER TABLE cloud_requests ADD COLUMN memory_mb INTEGER NOT NULL DEFAULT 0;
ALTER TABLE souls ADD COLUMN vcpus INTEGER NOT NULL DEFAULT 0;
ALTER TABLE souls ADD COLUMN memory_mb INTEGER NOT NULL DEFAULT 0;

-- Who holds which role in a project: an OIDC group, or a person
-- (issuer and subject, joined by a space).
CREATE TABLE project_bindings (
    project     TEXT NOT NULL REFERENCES projects (name) ON DELETE CASCADE,
    kind        TEXT NOT NULL,
    subject     TEXT NOT NULL,
    role        TEXT NOT NULL,
    created_at  TIMESTAMP NOT NULL,
    created_by  TEXT NOT NULL,
    PRIMARY KEY (project, kind, subject)
);

-- A provider or profile shared, to read and use, with another project.
CREATE TABLE project_shares (
    kind        TEXT NOT NULL,
    name        TEXT NOT NULL,
    project     TEXT NOT NULL REFERENCES projects (name) ON DELETE CASCADE,
    created_at  TIMESTAMP NOT NULL,
    created_by  TEXT NOT NULL,
    PRIMARY KEY (kind, name, project)
);
CREATE INDEX project_shares_project ON project_shares (project, kind, name);

-- +goose Down
DROP TABLE project_shares;
DROP TABLE project_bindings;
ALTER TABLE souls DROP COLUMN memory_mb;
ALTER TABLE souls DROP COLUMN vcpus;
ALTER TABLE cloud_requests DROP COLUMN memory_mb;
ALTER TABLE cloud_requests DROP COLUMN vcpus;
ALTER TABLE cloud_requests DROP COLUMN project;
ALTER TABLE projects DROP COLUMN quota_runs;
ALTER TABLE projects DROP COLUMN quota_memory_mb;
ALTER TABLE projects DROP COLUMN quota_vcpus;
ALTER TABLE projects DROP COLUMN quota_vms;
DROP INDEX audit_events_project;
DROP INDEX runs_project;
DROP INDEX souls_project;
DROP INDEX profiles_project;
DROP INDEX providers_project;
ALTER TABLE audit_events DROP COLUMN project;
ALTER TABLE api_tokens DROP COLUMN project;
ALTER TABLE runs DROP COLUMN project;
ALTER TABLE souls DROP COLUMN project;
ALTER TABLE profiles DROP COLUMN project;
ALTER TABLE providers DROP COLUMN project;
