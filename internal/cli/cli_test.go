package cli_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
	_ "modernc.org/sqlite" // the driver the tamper command opens the keeper's database with

	"github.com/soulstack/soulstack/internal/cli"
	"github.com/soulstack/soulstack/internal/config"
	"github.com/soulstack/soulstack/internal/keepertest"
	"github.com/soulstack/soulstack/internal/sshtest"
)

// TestMain makes the test binary double as soulctl: testscript puts a copy
// named soulctl on the scripts' PATH, and running it runs cli.Main.
func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"soulctl": func() { os.Exit(cli.Main()) },
	})
}

// TestScripts drives soulctl end to end against a real keeper: each script
// in testdata/script gets its own keeper, serving on a loopback port with an
// SQLite database in $WORK/.keeper. One real OpenSSH server (sshtest) serves
// as the host the scripts' runs reach. Scripts see:
//
//	SOULSTACK_KEEPER  the keeper's URL
//	ADMIN_TOKEN       the first admin token, also in ./.keeper/admin.token
//	KEEPER_DB         the keeper's SQLite file
//	SSH_ADDR          the SSH server's address (127.0.0.1)
//	SSH_PORT          its port
//	SSH_USER          the account its key logs in as
//	SSH_KEY_FILE      that private key, written to $WORK/.ssh (mode 0600)
//
// and three commands besides the standard ones:
//
//	exits N prog args...   run prog and require exit code N (stdout and stderr are kept)
//	capture VAR REGEXP     set VAR to the first group of REGEXP in the last stdout
//	audit-tamper SEQ       change audit row SEQ in the database behind the keeper's back
//	audit-truncate SEQ     delete the audit rows after SEQ and fix up the chain head
//	example NAME           copy examples/NAME into $WORK, its /tmp/ paths moved into $WORK
func TestScripts(t *testing.T) {
	t.Parallel()
	sshd := sshtest.Start(t, sshtest.Options{})
	testscript.Run(t, testscript.Params{
		Dir: filepath.Join("testdata", "script"),
		Setup: func(env *testscript.Env) error {
			if err := startKeeper(env); err != nil {
				return err
			}
			return useSSHD(env, sshd)
		},
		RequireExplicitExec: true,
		RequireUniqueNames:  true,
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"exits":          cmdExits,
			"eventually":     cmdEventually,
			"capture":        cmdCapture,
			"audit-tamper":   cmdAuditTamper,
			"audit-truncate": cmdAuditTruncate,
			"example":        cmdExample,
		},
	})
}

// startKeeper runs a keeper for one script until the script ends.
func startKeeper(env *testscript.Env) error {
	logFile, err := os.Create(filepath.Join(env.WorkDir, "keeper.log"))
	if err != nil {
		return err
	}
	// The scripts' SSH keys are files of the test's temporary directory.
	k, stop, err := keepertest.Launch(config.Config{Listen: "127.0.0.1:0", DataDir: filepath.Join(env.WorkDir, ".keeper"), Log: config.Log{Level: "info"},
		Credentials: config.Credentials{Files: []string{filepath.Clean(os.TempDir())}}}, logFile)
	if err != nil {
		logFile.Close()
		return fmt.Errorf("start keeper: %w", err)
	}
	env.Defer(func() {
		if err := stop(); err != nil {
			env.T().Log("keeper: ", err)
		}
		logFile.Close()
	})
	env.Setenv("SOULSTACK_KEEPER", k.URL)
	env.Setenv("KEEPER_URL", k.URL)
	env.Setenv("ADMIN_TOKEN", k.Token)
	env.Setenv("KEEPER_DB", k.Config.SQLitePath())
	return nil
}

// useSSHD tells a script how to reach the SSH server.
func useSSHD(env *testscript.Env, s *sshtest.Server) error {
	dir := filepath.Join(env.WorkDir, ".ssh")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	key := filepath.Join(dir, "id_ed25519")
	if err := os.WriteFile(key, s.ClientKey, 0o600); err != nil {
		return err
	}
	env.Setenv("SSH_ADDR", s.Addr)
	env.Setenv("SSH_PORT", strconv.Itoa(s.Port))
	env.Setenv("SSH_USER", s.User)
	env.Setenv("SSH_KEY_FILE", key)
	return nil
}

// cmdExits runs a program and checks its exit code.
func cmdExits(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: exits CODE program [args...]")
	}
	want, err := strconv.Atoi(args[0])
	ts.Check(err)
	got := 0
	if err := ts.Exec(args[1], args[2:]...); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			ts.Fatalf("run %s: %v", args[1], err)
		}
		got = ee.ExitCode()
	}
	if got != want {
		ts.Fatalf("%s exited with %d, want %d", args[1], got, want)
	}
}

// cmdEventually runs a program again, every 200 ms for at most 30 s, until
// it succeeds with a stdout that matches a regular expression: for what the
// keeper does after a command has returned (a remediation run started
// once a check's drift is recorded). Its last stdout is the script's.
func cmdEventually(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: eventually REGEXP program [args...]")
	}
	re, err := regexp.Compile(`(?m)` + args[0])
	ts.Check(err)
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := ts.Exec(args[1], args[2:]...)
		if err == nil && re.MatchString(ts.ReadFile("stdout")) {
			return
		}
		if time.Now().After(deadline) {
			ts.Fatalf("%s: no match for %q within 30 s (last: %v)", args[1], args[0], err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// cmdCapture sets an environment variable from the last command's stdout.
func cmdCapture(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: capture VAR REGEXP")
	}
	re, err := regexp.Compile(`(?m)` + args[1])
	ts.Check(err)
	m := re.FindStringSubmatch(ts.ReadFile("stdout"))
	if len(m) != 2 {
		ts.Fatalf("capture %s: no match with one group for %q in stdout", args[0], args[1])
	}
	ts.Setenv(args[0], m[1])
}

// cmdExample copies a scenario of examples/ into the script's directory,
// pointing the files it leaves on the host into $WORK so that scripts do
// not share them.
func cmdExample(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: example NAME")
	}
	src, err := os.ReadFile(filepath.Join("..", "..", "examples", args[0]))
	ts.Check(err)
	work := ts.Getenv("WORK")
	text := strings.ReplaceAll(string(src), "/tmp/", work+"/")
	ts.Check(os.WriteFile(filepath.Join(work, args[0]), []byte(text), 0o644))
}

// cmdAuditTamper edits one audit row directly in the keeper's database, as
// an attacker with file access would.
func cmdAuditTamper(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: audit-tamper SEQ")
	}
	seq, err := strconv.ParseInt(args[0], 10, 64)
	ts.Check(err)
	db, err := sql.Open("sqlite", "file:"+ts.Getenv("KEEPER_DB")+"?_pragma=busy_timeout(10000)")
	ts.Check(err)
	defer db.Close()
	res, err := db.Exec(`UPDATE audit_events SET object = object || '-tampered' WHERE seq = ?`, seq)
	ts.Check(err)
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		ts.Fatalf("audit-tamper: no row %d (%v)", seq, err)
	}
}

// cmdAuditTruncate deletes the audit rows after SEQ and points the chain
// head at row SEQ, as an attacker with write access to the database would
// to hide the last events.
func cmdAuditTruncate(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: audit-truncate SEQ")
	}
	seq, err := strconv.ParseInt(args[0], 10, 64)
	ts.Check(err)
	db, err := sql.Open("sqlite", "file:"+ts.Getenv("KEEPER_DB")+"?_pragma=busy_timeout(10000)")
	ts.Check(err)
	defer db.Close()
	_, err = db.Exec(`DELETE FROM audit_events WHERE seq > ?`, seq)
	ts.Check(err)
	_, err = db.Exec(`UPDATE audit_head SET seq = ?, hash = (SELECT hash FROM audit_events WHERE seq = ?) WHERE id = 1`, seq, seq)
	ts.Check(err)
}

// TestRunScenarioTooLarge: a scenario over 1 MiB is refused before it is
// sent, as an invalid scenario.
func TestRunScenarioTooLarge(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(path, []byte("# "+strings.Repeat("x", 1<<20)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr strings.Builder
	code := cli.Run(context.Background(), []string{"--keeper", "http://127.0.0.1:1", "run", path}, cli.Env{Stdout: &stdout, Stderr: &stderr})
	if code != cli.ExitInvalid {
		t.Errorf("exit code = %d, want %d; stderr:\n%s", code, cli.ExitInvalid, stderr.String())
	}
	if want := "error: big.yaml: the scenario is larger than 1 MiB; nothing ran\n"; stderr.String() != want {
		t.Errorf("stderr = %q, want %q", stderr.String(), want)
	}
}

// TestRunUsageErrors checks the exit codes and messages of calls that
// never reach a keeper.
func TestRunUsageErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantErr  string
	}{
		{"unknown command", []string{"frobnicate"}, cli.ExitUsage, `unknown command "frobnicate"`},
		{"unknown subcommand", []string{"provider", "lst"}, cli.ExitUsage, `unknown command "lst" for "soulctl provider"; did you mean list`},
		{"unknown flag", []string{"provider", "list", "--bogus"}, cli.ExitUsage, "unknown flag: --bogus"},
		{"missing argument", []string{"provider", "get"}, cli.ExitUsage, "soulctl provider get needs NAME"},
		{"extra argument", []string{"soul", "get", "a", "b"}, cli.ExitUsage, "takes 1 argument(s) (SID), got 2"},
		{"missing required flag", []string{"provider", "create", "x"}, cli.ExitUsage, `required flag(s) "driver" not set`},
		{"bad output format", []string{"version", "-o", "xml"}, cli.ExitUsage, `-o/--output: "xml" is not a format (table, json, yaml, jsonpath=EXPR, go-template=TEMPLATE)`},
		{"jsonpath without expression", []string{"version", "-o", "jsonpath"}, cli.ExitUsage, `-o/--output: "jsonpath" is not a format`},
		{"bad jsonpath", []string{"version", "-o", "jsonpath=$[", "--client"}, cli.ExitUsage, "-o jsonpath: "},
		{"bad go-template", []string{"version", "-o", "go-template={{.x", "--client"}, cli.ExitUsage, "-o go-template: "},
		{"bad jq", []string{"version", "--jq", ".[", "--client"}, cli.ExitUsage, "--jq: "},
		{"jq with yaml", []string{"version", "--jq", ".", "-o", "yaml", "--client"}, cli.ExitUsage, "--jq works on the JSON form: give it alone or with -o json, not -o yaml"},
		{"bad config JSON", []string{"provider", "create", "x", "--driver", "d", "--config", "{"}, cli.ExitUsage, "--config: want a JSON object"},
		{"config not an object", []string{"provider", "create", "x", "--driver", "d", "--config", "[1]"}, cli.ExitUsage, "--config: want a JSON object"},
		{"trailing config data", []string{"provider", "create", "x", "--driver", "d", "--config", "{} {}"}, cli.ExitUsage, "unexpected data after the JSON object"},
		{"missing config file", []string{"provider", "create", "x", "--driver", "d", "--config", "@/nonexistent/c.json"}, cli.ExitUsage, "--config: open /nonexistent/c.json"},
		{"bad attribute", []string{"soul", "add", "h", "--address", "a", "--attr", "role"}, cli.ExitUsage, `--attr: want key=value, got "role"`},
		{"duplicate attribute", []string{"soul", "add", "h", "--address", "a", "--attr", "k=1", "--attr", "k=2"}, cli.ExitUsage, `--attr: key "k" given twice`},
		{"bad expiry", []string{"token", "create", "t", "--role", "viewer", "--expires-in", "soon"}, cli.ExitUsage, `--expires-in: "soon" is not a duration`},
		{"negative expiry", []string{"token", "create", "t", "--role", "viewer", "--expires-in", "-1h"}, cli.ExitUsage, "--expires-in: must be positive"},
		{"bad keeper URL", []string{"--keeper", "ftp://x", "provider", "list"}, cli.ExitUsage, "--keeper: keeper URL"},
		{"unreachable keeper", []string{"--keeper", "http://127.0.0.1:1", "--token", "t", "provider", "list"}, cli.ExitUnreachable, "error: cannot reach the keeper at http://127.0.0.1:1:"},
		{"run without file", []string{"run"}, cli.ExitUsage, "soulctl run needs FILE"},
		{"run missing file", []string{"run", "/nonexistent/s.yaml"}, cli.ExitUsage, "read scenario: open /nonexistent/s.yaml"},
		{"run bad input", []string{"run", "s.yaml", "--input", "flag"}, cli.ExitUsage, `--input: want key=value, got "flag"`},
		{"run input twice", []string{"run", "s.yaml", "--input", "a=1", "--input", "a=2"}, cli.ExitUsage, `--input: key "a" given twice`},
		{"run missing input file", []string{"run", "s.yaml", "--input-file", "/nonexistent/in.json"}, cli.ExitUsage, "--input-file: open /nonexistent/in.json"},
		{"run bad timeout", []string{"run", "s.yaml", "--timeout", "soon"}, cli.ExitUsage, `--timeout: "soon" is not a duration`},
		{"run bad wait timeout", []string{"run", "s.yaml", "--wait-timeout", "-1s"}, cli.ExitUsage, "--wait-timeout: must be positive"},
		{"runs wait bad timeout", []string{"runs", "wait", "run_x", "--timeout", "0s"}, cli.ExitUsage, "--timeout: must be positive"},
		{"runs get without id", []string{"runs", "get"}, cli.ExitUsage, "soulctl runs get needs ID"},
		{"runs unknown subcommand", []string{"runs", "tail"}, cli.ExitUsage, `unknown command "tail" for "soulctl runs"`},
		{"modules show without id", []string{"modules", "show"}, cli.ExitUsage, "soulctl modules show needs ID"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr strings.Builder
			code := cli.Run(context.Background(), tt.args, cli.Env{Stdout: &stdout, Stderr: &stderr})
			if code != tt.wantCode {
				t.Errorf("exit code = %d, want %d; stderr:\n%s", code, tt.wantCode, stderr.String())
			}
			if !strings.Contains(stderr.String(), tt.wantErr) {
				t.Errorf("stderr = %q, want it to contain %q", stderr.String(), tt.wantErr)
			}
			if tt.wantCode == cli.ExitUsage && stdout.Len() > 0 {
				t.Errorf("stdout = %q, want nothing on a usage error", stdout.String())
			}
		})
	}
}
