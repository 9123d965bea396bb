// Package postgres declares core.postgres.installed, which installs
// PostgreSQL on Debian and Ubuntu souls with a database and its user, and
// optionally more databases and users.
//
// Run does all its work in one SSH round trip: a shell script (installed.sh)
// installs what is missing, starts the cluster, creates the roles and the
// databases, edits the configuration only when it differs, and verifies a
// password login over TCP for every user, then reports what it did as
// JSON. The passwords travel on the command's standard input only.
package postgres

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/subtle"
	_ "embed"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"

	"github.com/soulstack/soulstack/client"
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
	_ module.Checker   = (*Installed)(nil)
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
	// Users are the extra roles, besides DBUser.
	Users []User `json:"users,omitempty"`
	// Databases are the extra databases, besides DBName.
	Databases []Database `json:"databases,omitempty"`
}

// User is one element of the users param: an extra login role.
type User struct {
	Name     string `json:"name"`
	Password string `json:"password"`
}

// Database is one element of the databases param: an extra database and
// the user (db_user or one of users) that owns it.
type Database struct {
	Name  string `json:"name"`
	Owner string `json:"owner"`
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
		Summary: "Make sure PostgreSQL is installed and running on each target soul, with a database and a user that owns it (and optionally more of both).",
		Description: "Installs postgresql, postgresql-contrib and postgresql-client when psql is missing (postgresql-<pg_version> " +
			"when a version is asked, from the PostgreSQL project's apt repository when the distribution lacks it), makes sure " +
			"the cluster <version>/main is running, creates the users (db_user and `users`) and the databases (db_name and `databases`) " +
			"if they do not exist, sets a user's password when it no longer logs in, and verifies `SELECT 1` over TCP as every user " +
			"with its password.\n\n" +
			"Everything happens in one SSH round trip; the passwords are sent on the command's standard input only.",
		Side:       module.SideSoul,
		Idempotent: true,
		NeedsRoot:  true,
		Params: []module.Param{
			{Name: "pg_version", Type: module.TypeString, DefaultDoc: "the distribution's", Doc: "Major version to use, 10 or later, such as \"16\"; installed when missing."},
			{Name: "db_name", Type: module.TypeString, Required: true, Doc: "Database to create."},
			{Name: "db_user", Type: module.TypeString, Required: true, Doc: "User to create; it owns the database."},
			{Name: "db_password", Type: module.TypeString, Required: true, Secret: true, Doc: "Password of the user."},
			{Name: "listen_addresses", Type: module.TypeString, DefaultDoc: "localhost, or * when allow_remote is true", Doc: "Server listen_addresses, set with ALTER SYSTEM; a change restarts the server."},
			{Name: "allow_remote", Type: module.TypeBool, Default: false, Doc: "Add pg_hba.conf entries that let the owner of each database (db_name and `databases`) connect to it from remote_cidr with a password (scram-sha-256); false removes them."},
			{Name: "remote_cidr", Type: module.TypeString, Default: defaultRemoteCIDR, Doc: "Network the pg_hba.conf entries admit when allow_remote is true."},
			{Name: "users", Type: module.TypeList, Elem: module.TypeObject, Secret: true, Doc: "More users to create, besides db_user: each a map {name, password}; names follow the rules of db_user, passwords those of db_password."},
			{Name: "databases", Type: module.TypeList, Elem: module.TypeObject, Doc: "More databases to create, besides db_name: each a map {name, owner}, the owner being db_user or one of `users`."},
		},
		Output: []module.Field{
			{Name: "status", Type: "string", Doc: "ok."},
			{Name: "pg_version", Type: "string", Doc: "Installed server version, such as \"16.4\"."},
			{Name: "db_name", Type: "string", Doc: "The database."},
			{Name: "db_user", Type: "string", Doc: "The user."},
			{Name: "databases", Type: "array<string>", Doc: "Names of the extra databases (the `databases` param), empty when none."},
			{Name: "users", Type: "array<string>", Doc: "Names of the extra users (the `users` param), empty when none."},
			{Name: "config_changed", Type: "bool", Doc: "Whether listen_addresses (the server restarted) or the pg_hba.conf entries (the server reloaded) changed."},
		},
		CheckMode: "Asks what apply asks, in one round trip: is the server installed, is the cluster there and online, which roles and databases exist, do the managed block of pg_hba.conf and listen_addresses differ. " +
			"A password is compared with the role's stored SCRAM-SHA-256 secret (its salt and iterations from the server, the keys computed on the keeper), so a check never tries a login. " +
			"Installs, creates, writes, reloads and restarts nothing.",
		ChangesWhen:   "PostgreSQL was installed, the cluster was created or started, a user or database was created, a password was set, or the configuration changed.",
		UnchangedWhen: "Everything already existed with the requested configuration and every user logged in with its password.",
		Example: `- name: database
  on: db-1.local.test
  module: core.postgres.installed
  params:
    db_name: app
    db_user: app
    db_password: "${ input.db_password }"
    users:
      - name: report
        password: "${ input.report_password }"
    databases:
      - name: app_audit
        owner: app
      - name: reports
        owner: report`,
		Notes: []string{
			"The server restarts only when listen_addresses changed; a pg_hba.conf change alone reloads it.",
			"With allow_remote, pg_hba.conf gets one entry per database (db_name and each of `databases`) for its owner, in a block marked `# BEGIN/END soulstack core.postgres.installed`, rewritten only when it differs, so reruns do not duplicate it. A user that owns no database gets no entry.",
			"An existing user's password is set again only when a login with its password fails, so an unchanged password reports no change. An existing database keeps its owner.",
			"Each user is verified against the first database it owns, or against `postgres` when it owns none.",
			"db_password and every password in `users` are secret: they are masked on every output channel and sent on standard input, never in a command line or environment; the login check reads each from a private .pgpass file removed afterwards. They may not contain line breaks.",
			"For a printable-ASCII password the role gets a SCRAM-SHA-256 verifier made on the keeper, so the password itself is in no SQL statement the server could log; other passwords are sent as a quoted literal.",
			"User names (db_user and `users`) and database names (db_name and `databases`) must each be unique.",
			"Without systemd (containers, local VMs) the cluster is started with pg_ctlcluster; nothing starts it again at boot.",
		},
	}
}

// ValidateParams checks that db_name and db_user are plain SQL
// identifiers, that the password is not empty and has no line breaks, the
// forms of pg_version, listen_addresses and remote_cidr, and the elements
// of users and databases: the same rules for their names and passwords, no
// name given twice, and every database owned by db_user or one of users.
// A message never quotes a password.
func (*Installed) ValidateParams(v module.Values) error {
	errs := validateScalars(v)
	owners, userErrs := validateUsers(v)
	errs = append(errs, userErrs...)
	errs = append(errs, validateDatabases(v, owners)...)
	return errors.Join(errs...)
}

// validateScalars checks the single-valued params.
func validateScalars(v module.Values) []error {
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
		if s, _ := x.(string); !validPassword(s) {
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
	return errs
}

// validateUsers checks users: names unique with db_user, passwords. It
// returns the names a database may be owned by, nil while one is not
// known yet (an expression), which skips the owner check.
func validateUsers(v module.Values) (map[string]bool, []error) {
	var errs []error
	owners := map[string]bool{}
	if x, ok := v.Get("db_user"); ok {
		s, _ := x.(string)
		owners[s] = true
	} else if v.Dynamic("db_user") {
		owners = nil
	}
	x, ok := v.Get("users")
	if !ok {
		if v.Dynamic("users") {
			owners = nil
		}
		return owners, nil
	}
	list, _ := x.([]any)
	for i, e := range list {
		m, err := element("users", i, e, "name", "password")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		name, _ := m["name"].(string)
		if !sqlName.MatchString(name) {
			errs = append(errs, module.Invalid("users", "param \"users\": element %d: name must be a lower-case SQL identifier ([a-z_][a-z0-9_]*), got %q", i, name))
		} else if owners != nil && owners[name] {
			errs = append(errs, module.Invalid("users", "param \"users\": element %d: user %q is given twice (db_user and users must all differ)", i, name))
		}
		if owners != nil {
			owners[name] = true
		}
		if pw, _ := m["password"].(string); !validPassword(pw) {
			errs = append(errs, module.Invalid("users", "param \"users\": element %d: password must be non-empty and contain no line breaks or NUL bytes", i))
		}
	}
	return owners, errs
}

// validateDatabases checks databases: names unique with db_name, owners
// among owners (unless nil).
func validateDatabases(v module.Values, owners map[string]bool) []error {
	var errs []error
	dbs := map[string]bool{}
	if x, ok := v.Get("db_name"); ok {
		s, _ := x.(string)
		dbs[s] = true
	} else if v.Dynamic("db_name") {
		dbs = nil
	}
	x, ok := v.Get("databases")
	if !ok {
		return nil
	}
	list, _ := x.([]any)
	for i, e := range list {
		m, err := element("databases", i, e, "name", "owner")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		name, _ := m["name"].(string)
		if !sqlName.MatchString(name) {
			errs = append(errs, module.Invalid("databases", "param \"databases\": element %d: name must be a lower-case SQL identifier ([a-z_][a-z0-9_]*), got %q", i, name))
		} else if dbs != nil && dbs[name] {
			errs = append(errs, module.Invalid("databases", "param \"databases\": element %d: database %q is given twice (db_name and databases must all differ)", i, name))
		}
		if dbs != nil {
			dbs[name] = true
		}
		if owner, _ := m["owner"].(string); owners != nil && !owners[owner] {
			errs = append(errs, module.Invalid("databases", "param \"databases\": element %d: owner %q must be db_user or the name of one of users", i, owner))
		}
	}
	return errs
}

// element checks that e, element i of the list param, is a map with
// exactly the string fields keys, and returns it. The message names the
// keys, never a value: an element of users holds a password.
func element(param string, i int, e any, keys ...string) (map[string]any, error) {
	m, ok := e.(map[string]any)
	bad := !ok || len(m) != len(keys)
	for _, k := range keys {
		if _, isString := m[k].(string); !isString {
			bad = true
		}
	}
	if bad {
		return nil, module.Invalid(param, "param %q: element %d must be a map with exactly the string fields %s", param, i, strings.Join(keys, " and "))
	}
	return m, nil
}

// validPassword reports whether s can be a password: not empty, with no
// line break or NUL byte (the script reads each from one line of input).
func validPassword(s string) bool {
	return s != "" && !strings.ContainsAny(s, "\n\r\x00")
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
// ValidateParams accepted). The arguments are the script and the
// non-secret params: pg_version, db_name, db_user, listen_addresses,
// allow_remote, remote_cidr, the extra users' names separated by spaces,
// and the extra databases as name:owner pairs separated by spaces.
// Standard input holds two lines per user, db_user first and then users
// in order: the password, then its SCRAM verifier from verifiers (the
// same order; an empty line when there is none).
func command(p InstalledParams, verifiers []string, mode string) module.Command {
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
	users := make([]string, len(p.Users))
	for i, u := range p.Users {
		users[i] = u.Name
	}
	dbs := make([]string, len(p.Databases))
	for i, d := range p.Databases {
		dbs[i] = d.Name + ":" + d.Owner
	}
	var stdin strings.Builder
	for i, pw := range passwords(p) {
		v := ""
		if i < len(verifiers) {
			v = verifiers[i]
		}
		stdin.WriteString(pw + "\n" + v + "\n")
	}
	return module.Command{
		Argv: []string{"/bin/sh", "-c", installScript, "sh", p.PGVersion, p.DBName, p.DBUser, listen, fmt.Sprint(p.AllowRemote), cidr,
			strings.Join(users, " "), strings.Join(dbs, " "), mode},
		Stdin: []byte(stdin.String()),
	}
}

// passwords returns the passwords of db_user and of every extra user, in
// that order.
func passwords(p InstalledParams) []string {
	pws := []string{p.DBPassword}
	for _, u := range p.Users {
		pws = append(pws, u.Password)
	}
	return pws
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
	if len(p.Users) > 0 {
		users := make([]any, len(p.Users))
		for i, u := range p.Users {
			users[i] = map[string]any{"name": u.Name, "password": u.Password}
		}
		v.Set("users", users)
	}
	if len(p.Databases) > 0 {
		dbs := make([]any, len(p.Databases))
		for i, d := range p.Databases {
			dbs[i] = map[string]any{"name": d.Name, "owner": d.Owner}
		}
		v.Set("databases", dbs)
	}
	return v
}

// Run makes sure PostgreSQL runs on the soul with the databases and users,
// in one command. It fails with postgres.install_failed when packages
// could not be installed, postgres.verify_failed when a user cannot run
// SELECT 1 over TCP with its password, and postgres.failed otherwise.
func (m *Installed) Run(ctx context.Context, run module.RunInfo, raw json.RawMessage, t module.Target) (module.Result, error) {
	p, err := m.params(run, raw)
	if err != nil {
		return module.Result{}, err
	}
	pws := passwords(p)
	verifiers := make([]string, len(pws))
	for i, pw := range pws {
		v, _, err := scramVerifier(pw)
		if err != nil {
			return module.Result{}, &module.Error{Code: CodeFailed, Message: "make a password's SCRAM verifier", Err: err}
		}
		verifiers[i] = v
	}
	res, err := t.Exec(ctx, command(p, verifiers, "apply"))
	if err != nil {
		return module.Result{}, err
	}
	if res.ExitCode != 0 {
		return module.Result{}, scriptError(res, append(pws, verifiers...))
	}
	out := bytes.TrimSpace(res.Stdout)
	if i := bytes.LastIndexByte(out, '\n'); i >= 0 {
		out = out[i+1:]
	}
	var r report
	if err := json.Unmarshal(out, &r); err != nil {
		return module.Result{}, &module.Error{Code: CodeFailed, Message: fmt.Sprintf("unreadable report from the soul: %q", out), Err: err}
	}
	// Outputs are JSON-like values: lists are []any.
	users := make([]any, len(p.Users))
	for i, u := range p.Users {
		users[i] = u.Name
	}
	dbs := make([]any, len(p.Databases))
	for i, d := range p.Databases {
		dbs[i] = d.Name
	}
	return module.Result{Changed: r.Changed, Output: map[string]any{
		"status":         "ok",
		"pg_version":     r.PGVersion,
		"db_name":        p.DBName,
		"db_user":        p.DBUser,
		"databases":      dbs,
		"users":          users,
		"config_changed": r.ConfigChanged,
	}}, nil
}

// params decodes and checks Run's and Check's params; the passwords inside
// the users list join the run's secrets here, before anything can echo
// them (the engine masks the string value of a secret param itself).
func (m *Installed) params(run module.RunInfo, raw json.RawMessage) (InstalledParams, error) {
	var p InstalledParams
	if err := module.DecodeParams(raw, &p); err != nil {
		return p, err
	}
	for _, u := range p.Users {
		run.AddSecret(u.Password)
	}
	return p, m.ValidateParams(paramValues(p))
}

// scriptError is the error of the script's non-zero exit: its code from
// the exit status, its message from stderr with secrets masked (the
// script never prints a password; a tool on the soul might echo one).
func scriptError(res module.ExecResult, secrets []string) error {
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
	for _, s := range secrets {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, "***")
		}
	}
	return &module.Error{Code: code, Message: msg}
}

// Check asks the soul, in one round trip and changing nothing, what Run
// would change: the server to install, the cluster to create or start,
// the roles and databases to create, pg_hba.conf's managed block and
// listen_addresses to set. A password is compared with the role's stored
// SCRAM secret (salt and iterations from the server, the keys computed
// here), so a check never tries a login; the secret never leaves Check.
func (m *Installed) Check(ctx context.Context, run module.RunInfo, raw json.RawMessage, t module.Target) (module.Prediction, error) {
	p, err := m.params(run, raw)
	if err != nil {
		return module.Prediction{}, err
	}
	res, err := t.Exec(ctx, command(p, make([]string, len(passwords(p))), "check"))
	if err != nil {
		return module.Prediction{}, err
	}
	if res.ExitCode != 0 {
		return module.Prediction{}, scriptError(res, passwords(p))
	}
	pws := map[string]string{p.DBUser: p.DBPassword}
	for _, u := range p.Users {
		pws[u.Name] = u.Password
	}
	var pred module.Prediction
	for _, line := range strings.Split(string(res.Stdout), "\n") {
		f := strings.Split(line, "\t")
		switch {
		case f[0] == "@change" && len(f) == 6:
			pred.Changes = append(pred.Changes, client.Change{Kind: f[1], Action: f[2], Name: f[3], Before: f[4], After: f[5]})
		case f[0] == "@role" && len(f) == 4:
			name, canLogin, stored := f[1], f[2] == "t", f[3]
			switch {
			case !canLogin:
				pred.Changes = append(pred.Changes, client.Change{Kind: "role", Action: "update", Name: name, Note: "may not log in: LOGIN and the password are set"})
			case !passwordMatches(pws[name], name, stored):
				pred.Changes = append(pred.Changes, client.Change{Kind: "role", Action: "update", Name: name, Note: "the password differs: it is set"})
			}
		}
	}
	pred.WouldChange = len(pred.Changes) > 0
	return pred, nil
}

// passwordMatches reports whether stored, a role's rolpassword, is the
// secret of password: a SCRAM-SHA-256 verifier recomputed with its salt
// and iterations, or an md5 hash of password and user.
func passwordMatches(password, user, stored string) bool {
	if rest, ok := strings.CutPrefix(stored, "SCRAM-SHA-256$"); ok {
		iterSalt, _, _ := strings.Cut(rest, "$")
		iter, salt64, ok := strings.Cut(iterSalt, ":")
		n, err := strconv.Atoi(iter)
		salt, serr := base64.StdEncoding.DecodeString(salt64)
		if !ok || err != nil || serr != nil || n <= 0 {
			return false
		}
		v, err := scramFromSalt(password, salt, n)
		return err == nil && subtle.ConstantTimeCompare([]byte(v), []byte(stored)) == 1
	}
	if strings.HasPrefix(stored, "md5") {
		sum := md5.Sum([]byte(password + user))
		return subtle.ConstantTimeCompare([]byte("md5"+hex.EncodeToString(sum[:])), []byte(stored)) == 1
	}
	return false
}
