// Package postgres declares core.postgres.installed, which installs
// PostgreSQL on Debian and Ubuntu souls with one database and user.
//
// Run is not implemented in this build: it returns an error with code
// module.not_implemented. The declaration is registered so that scenarios
// using the module validate and the catalog lists it.
package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"

	"github.com/soulstack/soulstack/internal/module"
)

// InstalledID is the ID of the Installed state.
const InstalledID module.ID = "core.postgres.installed"

func init() { module.Register(new(Installed)) }

// Installed is the core.postgres.installed state.
type Installed struct{}

var (
	_ module.Module    = (*Installed)(nil)
	_ module.Validator = (*Installed)(nil)
)

// InstalledParams are the params of core.postgres.installed.
type InstalledParams struct {
	PGVersion       string `json:"pg_version,omitempty"`
	DBName          string `json:"db_name"`
	DBUser          string `json:"db_user"`
	DBPassword      string `json:"db_password"`
	ListenAddresses string `json:"listen_addresses"`
	AllowRemote     bool   `json:"allow_remote"`
}

// sqlName is a PostgreSQL identifier that needs no quoting.
var sqlName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// Info returns the declaration of core.postgres.installed.
func (*Installed) Info() module.Info {
	return module.Info{
		ID:      InstalledID,
		Summary: "Make sure PostgreSQL is installed and running on each target soul, with a database and a user that owns it.",
		Description: "Installs postgresql, postgresql-contrib and postgresql-client when psql is missing, makes sure the " +
			"service is active, creates the user and the database if they do not exist, and verifies `SELECT 1` as the new user.",
		Side:       module.SideSoul,
		Idempotent: true,
		NeedsRoot:  true,
		Params: []module.Param{
			{Name: "pg_version", Type: module.TypeString, DefaultDoc: "the distribution's", Doc: "Major version to install, such as \"16\"."},
			{Name: "db_name", Type: module.TypeString, Required: true, Doc: "Database to create."},
			{Name: "db_user", Type: module.TypeString, Required: true, Doc: "User to create; it owns the database."},
			{Name: "db_password", Type: module.TypeString, Required: true, Secret: true, Doc: "Password of the user."},
			{Name: "listen_addresses", Type: module.TypeString, Default: "localhost", Doc: "postgresql.conf listen_addresses."},
			{Name: "allow_remote", Type: module.TypeBool, Default: false, Doc: "Add a pg_hba.conf entry that lets the user connect from other hosts with a password."},
		},
		Output: []module.Field{
			{Name: "status", Type: "string", Doc: "ok."},
			{Name: "pg_version", Type: "string", Doc: "Installed server version, such as \"16.4\"."},
			{Name: "db_name", Type: "string", Doc: "The database."},
			{Name: "db_user", Type: "string", Doc: "The user."},
			{Name: "config_changed", Type: "bool", Doc: "Whether postgresql.conf or pg_hba.conf changed (and the server restarted)."},
		},
		ChangesWhen:   "PostgreSQL was installed, the user or database was created, or the configuration changed.",
		UnchangedWhen: "Everything already existed with the requested configuration.",
		Example: `- name: database
  on: db-1.local.test
  module: core.postgres.installed
  params:
    db_name: app
    db_user: app
    db_password: "${ input.db_password }"`,
		Notes: []string{
			"The server restarts only when its configuration changed.",
			"pg_hba.conf is checked before appending, so reruns do not duplicate entries.",
			"db_password is secret: it is masked on every output channel; give it through a secret input.",
		},
	}
}

// ValidateParams checks that db_name and db_user are plain SQL
// identifiers.
func (*Installed) ValidateParams(v module.Values) error {
	var errs []error
	for _, name := range []string{"db_name", "db_user"} {
		if x, ok := v.Get(name); ok {
			if s, _ := x.(string); !sqlName.MatchString(s) {
				errs = append(errs, module.Invalid(name, "param %q must be a lower-case SQL identifier ([a-z_][a-z0-9_]*), got %q", name, s))
			}
		}
	}
	return errors.Join(errs...)
}

// Run is not implemented in this build; it returns a module.not_implemented
// error.
func (*Installed) Run(context.Context, json.RawMessage, module.Target) (module.Result, error) {
	return module.Result{}, module.NotImplemented(InstalledID)
}
