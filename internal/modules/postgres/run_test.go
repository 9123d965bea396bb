package postgres_test

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/soulstack/soulstack/internal/module"
	"github.com/soulstack/soulstack/internal/modules/postgres"
)

// fakeTarget records the commands Run sends and answers each with a
// fixed result.
type fakeTarget struct {
	res  module.ExecResult
	cmds []module.Command
}

func (f *fakeTarget) SID() string { return "db-1.test" }

func (f *fakeTarget) Exec(_ context.Context, cmd module.Command) (module.ExecResult, error) {
	f.cmds = append(f.cmds, cmd)
	return f.res, nil
}

// secrets records what a module registers with its run's masker.
type secrets map[string]bool

func (s secrets) Add(v string) { s[v] = true }

// runFake runs the module with params on a fakeTarget answering res.
func runFake(t *testing.T, params map[string]any, res module.ExecResult) (*fakeTarget, module.Result, error) {
	f, out, _, err := runFakeSecrets(t, params, res)
	return f, out, err
}

// runFakeSecrets is runFake that also returns the secrets Run registered.
func runFakeSecrets(t *testing.T, params map[string]any, res module.ExecResult) (*fakeTarget, module.Result, secrets, error) {
	t.Helper()
	m := &postgres.Installed{}
	raw, err := json.Marshal(module.ApplyDefaults(m.Info(), params))
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeTarget{res: res}
	reg := secrets{}
	out, err := m.Run(context.Background(), module.RunInfo{Secrets: reg}, raw, f)
	return f, out, reg, err
}

// TestRunCommand checks the one command Run builds for extra users and
// databases: the names as arguments, every password and its verifier on
// a line of standard input, no password in the arguments or environment;
// and the output, with the extra names.
func TestRunCommand(t *testing.T) {
	t.Parallel()
	const (
		pw0 = "canary-run-0:'x"
		pw1 = "canary-run-1 with spaces"
		pw2 = "canary-run-2-pässwörd"
	)
	params := map[string]any{
		"db_name": "appdb", "db_user": "app", "db_password": pw0, "allow_remote": true, "remote_cidr": "10.0.0.0/8",
		"users":     []any{user("report", pw1), user("audit", pw2)},
		"databases": []any{database("reports", "report"), database("app_audit", "app")},
	}
	report := `{"changed":true,"installed":false,"config_changed":true,"restarted":true,"role_created":true,"db_created":true,"password_changed":false,"pg_version":"16.4"}`
	f, res, reg, err := runFakeSecrets(t, params, module.ExecResult{Stdout: []byte("noise\n" + report + "\n")})
	if err != nil {
		t.Fatal(err)
	}
	if len(f.cmds) != 1 {
		t.Fatalf("%d commands, want 1", len(f.cmds))
	}
	c := f.cmds[0]
	if len(c.Argv) != 13 || c.Argv[0] != "/bin/sh" || c.Argv[1] != "-c" {
		t.Fatalf("argv = %q", c.Argv)
	}
	if got, want := c.Argv[4:], []string{"", "appdb", "app", "*", "true", "10.0.0.0/8", "report audit", "reports:report app_audit:app", "apply"}; !reflect.DeepEqual(got, want) {
		t.Errorf("arguments = %q, want %q", got, want)
	}
	if len(c.Env) != 0 {
		t.Errorf("env = %v, want none", c.Env)
	}
	for i, pw := range []string{pw0, pw1, pw2} {
		if strings.Contains(strings.Join(c.Argv, "\x00"), pw) {
			t.Errorf("password %d is in the arguments", i)
		}
		// The engine registers db_password; Run registers the users'.
		if i > 0 && !reg[pw] {
			t.Errorf("the password of users[%d] is not registered as a secret", i-1)
		}
	}
	lines := strings.Split(string(c.Stdin), "\n")
	if len(lines) != 7 || lines[6] != "" {
		t.Fatalf("stdin has %d lines, want 6 and a final newline", len(lines)-1)
	}
	if lines[0] != pw0 || lines[2] != pw1 || lines[4] != pw2 {
		t.Error("stdin does not hold the passwords of db_user, then users in order, on lines 1, 3 and 5")
	}
	// A SCRAM verifier for the ASCII passwords; none for the other, whose
	// password goes as a literal.
	if !strings.HasPrefix(lines[1], "SCRAM-SHA-256$4096:") || !strings.HasPrefix(lines[3], "SCRAM-SHA-256$4096:") || lines[5] != "" {
		t.Errorf("verifier lines = %q, %q, %q", lines[1], lines[3], lines[5])
	}

	want := map[string]any{
		"status": "ok", "pg_version": "16.4", "db_name": "appdb", "db_user": "app", "config_changed": true,
		"databases": []any{"reports", "app_audit"}, "users": []any{"report", "audit"},
	}
	if !res.Changed || !reflect.DeepEqual(res.Output, want) {
		t.Errorf("result = %+v, want changed and output %v", res, want)
	}

	// Without extras: the two list arguments are empty, the output lists too.
	f, res, err = runFake(t, map[string]any{"db_name": "appdb", "db_user": "app", "db_password": pw0},
		module.ExecResult{Stdout: []byte(strings.Replace(report, `"changed":true`, `"changed":false`, 1))})
	if err != nil {
		t.Fatal(err)
	}
	if got := f.cmds[0].Argv[4:]; !reflect.DeepEqual(got, []string{"", "appdb", "app", "localhost", "false", "0.0.0.0/0", "", "", "apply"}) {
		t.Errorf("arguments without extras = %q", got)
	}
	if in := string(f.cmds[0].Stdin); strings.Count(in, "\n") != 2 || !strings.HasPrefix(in, pw0+"\nSCRAM-SHA-256$") {
		t.Error("stdin without extras is not the password and its verifier")
	}
	out := res.Output.(map[string]any)
	if res.Changed || len(out["databases"].([]any)) != 0 || len(out["users"].([]any)) != 0 {
		t.Errorf("result without extras = %+v", res)
	}
}

// TestRunRefusesBadParams checks that Run validates the decoded params
// itself (an owner that is not a user) and sends nothing.
func TestRunRefusesBadParams(t *testing.T) {
	t.Parallel()
	f, _, err := runFake(t, map[string]any{
		"db_name": "appdb", "db_user": "app", "db_password": "canary-bad-0",
		"databases": []any{database("reports", "nobody")},
	}, module.ExecResult{})
	if err == nil || !strings.Contains(err.Error(), `owner "nobody"`) || len(f.cmds) != 0 {
		t.Fatalf("err = %v, %d commands", err, len(f.cmds))
	}
}

// TestRunMasksPasswordsInErrors checks that a failure whose standard
// error echoes an extra user's password reports it masked, with the
// code the exit status gives.
func TestRunMasksPasswordsInErrors(t *testing.T) {
	t.Parallel()
	const pw = "canary-err-1"
	_, _, err := runFake(t, map[string]any{
		"db_name": "appdb", "db_user": "app", "db_password": "canary-err-0",
		"users": []any{user("report", pw)},
	}, module.ExecResult{ExitCode: 11, Stderr: []byte("SELECT 1 as report failed: a tool printed " + pw)})
	if module.Code(err) != postgres.CodeVerifyFailed {
		t.Fatalf("code = %s (%v), want %s", module.Code(err), err, postgres.CodeVerifyFailed)
	}
	if strings.Contains(err.Error(), pw) || !strings.Contains(err.Error(), "***") {
		t.Fatalf("error = %q, want the password masked", err)
	}
}
