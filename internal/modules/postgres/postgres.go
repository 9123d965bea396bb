// Package postgres declares core.postgres.installed, which installs
// PostgreSQL on Debian and Ubuntu souls with one database and user.
//
// Run does all its work in one SSH round trip: a shell script (installed.sh)
// installs what is missing, starts the cluster, creates the role and the
// database, edits the configuration only when it differs, and verifies a
// password login over TCP, then reports what it did as JSON. The password
// travels on the command's standard input only.
package postgres

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strings"

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
	ListenAddresses string `json:"listen_addresses,omitempty"`
	AllowRemote     bool   `json:"allow_remote"`
	RemoteCIDR      string `json:"remote_cidr,omitempty"`
}

// Error codes of core.postgres.installed.
const (
	// CodeInstallFailed means installing the PostgreSQL packages failed.
	CodeInstallFailed = "postgres.install_failed"
	// CodeVerifyFailed means the new user could not run SELECT 1 over TCP.
	CodeVerifyFailed = "postgres.verify_failed"
	// CodeFailed is any other failure on the soul (starting the cluster,
	// creating the role or database, editing the configuration).
	CodeFailed = "postgres.failed"
)

// defaultRemoteCIDR is the network allow_remote opens when remote_cidr is
// not given.
const defaultRemoteCIDR = "0.0.0.0/0"

// sqlName is a PostgreSQL identifier that needs no quoting.
var sqlName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// listenRE matches a listen_addresses value without spaces: host names or
// addresses, or *, separated by commas.
var listenRE = regexp.MustCompile(`^[A-Za-z0-9.:*%_-]+(,[A-Za-z0-9.:*%_-]+)*$`)

// versionRE matches a major version from 10 on, as Debian packages name
// it; older servers cannot take SCRAM verifiers.
var versionRE = regexp.MustCompile(`^[1-9][0-9]$`)

// Info returns the declaration of core.postgres.installed.
func (*Installed) Info() module.Info {
	return module.Info{
		ID:      InstalledID,
		Summary: "Make sure PostgreSQL is installed and running on each target soul, with a database and a user that owns it.",
		Description: "Installs postgresql, postgresql-contrib and postgresql-client when psql is missing (postgresql-<pg_version> " +
			"when a version is asked, from the PostgreSQL project's apt repository when the distribution lacks it), makes sure " +
			"the cluster <version>/main is running, creates the user and the database if they do not exist, sets the user's " +
			"password when it no longer logs in, and verifies `SELECT 1` over TCP as the new user with its password.\n\n" +
			"Everything happens in one SSH round trip; the password is sent on the command's standard input only.",
		Side:       module.SideSoul,
		Idempotent: true,
		NeedsRoot:  true,
		Params: []module.Param{
			{Name: "pg_version", Type: module.TypeString, DefaultDoc: "the distribution's", Doc: "Major version to use, 10 or later, such as \"16\"; installed when missing."},
			{Name: "db_name", Type: module.TypeString, Required: true, Doc: "Database to create."},
			{Name: "db_user", Type: module.TypeString, Required: true, Doc: "User to create; it owns the database."},
			{Name: "db_password", Type: module.TypeString, Required: true, Secret: true, Doc: "Password of the user."},
			{Name: "listen_addresses", Type: module.TypeString, DefaultDoc: "localhost, or * when allow_remote is true", Doc: "Server listen_addresses, set with ALTER SYSTEM; a change restarts the server."},
			{Name: "allow_remote", Type: module.TypeBool, Default: false, Doc: "Add a pg_hba.conf entry that lets the user connect to the database from remote_cidr with a password (scram-sha-256); false removes it."},
			{Name: "remote_cidr", Type: module.TypeString, Default: defaultRemoteCIDR, Doc: "Network the pg_hba.conf entry admits when allow_remote is true."},
		},
		Output: []module.Field{
			{Name: "status", Type: "string", Doc: "ok."},
			{Name: "pg_version", Type: "string", Doc: "Installed server version, such as \"16.4\"."},
			{Name: "db_name", Type: "string", Doc: "The database."},
			{Name: "db_user", Type: "string", Doc: "The user."},
			{Name: "config_changed", Type: "bool", Doc: "Whether listen_addresses (the server restarted) or the pg_hba.conf entry (the server reloaded) changed."},
		},
		ChangesWhen:   "PostgreSQL was installed, the cluster was created or started, the user or database was created, the password was set, or the configuration changed.",
		UnchangedWhen: "Everything already existed with the requested configuration and the user logged in with the password.",
		Example: `- name: database
  on: db-1.local.test
  module: core.postgres.installed
  params:
    db_name: app
    db_user: app
    db_password: "${ input.db_password }"`,
		Notes: []string{
			"The server restarts only when listen_addresses changed; a pg_hba.conf change alone reloads it.",
			"The pg_hba.conf entry sits in a block marked `# BEGIN/END soulstack core.postgres.installed`, rewritten only when it differs, so reruns do not duplicate it.",
			"An existing user's password is set again only when a login with db_password fails, so an unchanged password reports no change.",
			"db_password is secret: it is masked on every output channel and sent on standard input, never in a command line or environment; the login check reads it from a private .pgpass file removed afterwards. It may not contain line breaks.",
			"For a printable-ASCII password the role gets a SCRAM-SHA-256 verifier made on the keeper, so the password itself is in no SQL statement the server could log; other passwords are sent as a quoted literal.",
			"Without systemd (containers, local VMs) the cluster is started with pg_ctlcluster; nothing starts it again at boot.",
		},
	}
}

// ValidateParams checks that db_name and db_user are plain SQL
// identifiers, that the password is not empty and has no line breaks, and
// the forms of pg_version, listen_addresses and remote_cidr.
func (*Installed) ValidateParams(v module.Values) error {
	var errs []error
	for _, name := range []string{"db_name", "db_user"} {
		if x, ok := v.Get(name); ok {
			if s, _ := x.(string); !sqlName.MatchString(s) {
				errs = append(errs, module.Invalid(name, "param %q must be a lower-case SQL identifier ([a-z_][a-z0-9_]*), got %q", name, s))
			}
		}
	}
	if x, ok := v.Get("db_password"); ok {
		// The value is secret: the message never quotes it.
		if s, _ := x.(string); s == "" || strings.ContainsAny(s, "\n\r\x00") {
			errs = append(errs, module.Invalid("db_password", `param "db_password" must be non-empty and contain no line breaks or NUL bytes`))
		}
	}
	if x, ok := v.Get("pg_version"); ok {
		if s, _ := x.(string); !versionRE.MatchString(s) {
			errs = append(errs, module.Invalid("pg_version", `param "pg_version" must be a major version such as "16", got %q`, s))
		}
	}
	if x, ok := v.Get("listen_addresses"); ok {
		if s, _ := x.(string); !listenRE.MatchString(strings.ReplaceAll(s, " ", "")) {
			errs = append(errs, module.Invalid("listen_addresses", `param "listen_addresses" must be a comma-separated list of host names, addresses or *, got %q`, s))
		}
	}
	if x, ok := v.Get("remote_cidr"); ok {
		if s, _ := x.(string); !validCIDR(s) {
			errs = append(errs, module.Invalid("remote_cidr", `param "remote_cidr" must be a network such as 10.0.0.0/8, got %q`, s))
		}
	}
	return errors.Join(errs...)
}

// validCIDR reports whether s is a network address with its prefix
// length, with no host bits set.
func validCIDR(s string) bool {
	p, err := netip.ParsePrefix(s)
	return err == nil && p == p.Masked()
}

// installScript is the shell script Run sends to the soul.
//
//go:embed installed.sh
var installScript string

// report is the JSON line installed.sh prints when it succeeds.
type report struct {
	Changed         bool   `json:"changed"`
	Installed       bool   `json:"installed"`
	ConfigChanged   bool   `json:"config_changed"`
	Restarted       bool   `json:"restarted"`
	RoleCreated     bool   `json:"role_created"`
	DBCreated       bool   `json:"db_created"`
	PasswordChanged bool   `json:"password_changed"`
	PGVersion       string `json:"pg_version"`
}

// command returns the command Run sends to the soul for p (which
// ValidateParams accepted): the script and the non-secret params as
// arguments; the password and its SCRAM verifier (empty when verifier is
// empty) as standard input.
func command(p InstalledParams, verifier string) module.Command {
	listen := strings.ReplaceAll(p.ListenAddresses, " ", "")
	if listen == "" {
		listen = "localhost"
		if p.AllowRemote {
			listen = "*"
		}
	}
	cidr := p.RemoteCIDR
	if cidr == "" {
		cidr = defaultRemoteCIDR
	}
	return module.Command{
		Argv:  []string{"/bin/sh", "-c", installScript, "sh", p.PGVersion, p.DBName, p.DBUser, listen, fmt.Sprint(p.AllowRemote), cidr},
		Stdin: []byte(p.DBPassword + "\n" + verifier + "\n"),
	}
}

// paramValues returns p as Values, for ValidateParams.
func paramValues(p InstalledParams) module.Values {
	var v module.Values
	v.Set("db_name", p.DBName)
	v.Set("db_user", p.DBUser)
	v.Set("db_password", p.DBPassword)
	for name, x := range map[string]string{"pg_version": p.PGVersion, "listen_addresses": p.ListenAddresses, "remote_cidr": p.RemoteCIDR} {
		if x != "" {
			v.Set(name, x)
		}
	}
	return v
}

// Run makes sure PostgreSQL runs on the soul with the database and user,
// in one command. It fails with postgres.install_failed when packages
// could not be installed, postgres.verify_failed when the user cannot run
// SELECT 1 over TCP with its password, and postgres.failed otherwise.
func (m *Installed) Run(ctx context.Context, raw json.RawMessage, t module.Target) (module.Result, error) {
	var p InstalledParams
	if err := module.DecodeParams(raw, &p); err != nil {
		return module.Result{}, err
	}
	if err := m.ValidateParams(paramValues(p)); err != nil {
		return module.Result{}, err
	}
	verifier, _, err := scramVerifier(p.DBPassword)
	if err != nil {
		return module.Result{}, &module.Error{Code: CodeFailed, Message: "make the password's SCRAM verifier", Err: err}
	}
	res, err := t.Exec(ctx, command(p, verifier))
	if err != nil {
		return module.Result{}, err
	}
	if res.ExitCode != 0 {
		code := CodeFailed
		switch res.ExitCode {
		case 10:
			code = CodeInstallFailed
		case 11:
			code = CodeVerifyFailed
		}
		msg := strings.TrimSpace(string(res.Stderr))
		if msg == "" {
			msg = fmt.Sprintf("exit status %d", res.ExitCode)
		}
		// The script never prints the password; mask it anyway in case a
		// tool on the soul echoed it.
		msg = strings.ReplaceAll(msg, p.DBPassword, "***")
		return module.Result{}, &module.Error{Code: code, Message: msg}
	}
	out := bytes.TrimSpace(res.Stdout)
	if i := bytes.LastIndexByte(out, '\n'); i >= 0 {
		out = out[i+1:]
	}
	var r report
	if err := json.Unmarshal(out, &r); err != nil {
		return module.Result{}, &module.Error{Code: CodeFailed, Message: fmt.Sprintf("unreadable report from the soul: %q", out), Err: err}
	}
	return module.Result{Changed: r.Changed, Output: map[string]any{
		"status":         "ok",
		"pg_version":     r.PGVersion,
		"db_name":        p.DBName,
		"db_user":        p.DBUser,
		"config_changed": r.ConfigChanged,
	}}, nil
}
