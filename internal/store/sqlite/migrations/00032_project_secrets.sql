-- +goose Up
-- A project's own secrets, referenced by its providers and souls as
-- credential:NAME and resolved in the referring object's project alone.
-- The value is sealed with the data key; no API answer carries it.
CREATE TABLE credentials (
    project     TEXT NOT NULL REFERENCES projects (name) ON DELETE CASCADE,
    name        TEXT NOT NULL,
    sealed      TEXT NOT NULL,
    created_at  TIMESTAMP NOT NULL,
    created_by  TEXT NOT NULL,
    PRIMARY KEY (project, name)
);

-- Each project's own keeper SSH key (OpenSSH PEM, sealed with the data
-- key): what its souls without a key_ref are reached with and what its
-- VMs' userdata authorizes. The default project keeps the keeper's key
-- from <data_dir>/ssh, which the VMs made before projects trust.
CREATE TABLE project_ssh_keys (
    project     TEXT PRIMARY KEY REFERENCES projects (name) ON DELETE CASCADE,
    sealed      TEXT NOT NULL,
    public_key  TEXT NOT NULL,
    created_at  TIMESTAMP NOT NULL
);

-- The files runs wrote from secret content (a secret input in a
-- core.file.present content): no check's diff shows what such a file
-- holds, before or after. Soul and path only, never the content.
CREATE TABLE secret_files (
    sid        TEXT NOT NULL,
    path       TEXT NOT NULL,
    run_id     TEXT NOT NULL,
    marked_at  TIMESTAMP NOT NULL,
    PRIMARY KEY (sid, path)
);

-- +goose Down
DROP TABLE secret_files;
DROP TABLE project_ssh_keys;
DROP TABLE credentials;
