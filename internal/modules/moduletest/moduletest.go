// Package moduletest gives module tests a real soul: an OpenSSH server
// started by internal/sshtest, reached through the SSH transport as a
// module.Target.
package moduletest

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/soulstack/soulstack/internal/module"
	"github.com/soulstack/soulstack/internal/sshtest"
	"github.com/soulstack/soulstack/internal/transport/ssh"
)

// Target is a module.Target over a real sshd.
type Target struct {
	Server *sshtest.Server
	client *ssh.Client
	// Files, when set, is what ReadKeeperFile serves.
	Files map[string][]byte
}

// New starts an sshd for the test and connects to it.
func New(t testing.TB) *Target {
	t.Helper()
	srv := sshtest.Start(t, sshtest.Options{})
	pool := ssh.NewPool(ssh.Options{})
	t.Cleanup(func() { pool.Close() })
	c, err := pool.Get(context.Background(), ssh.Target{Address: srv.Addr, Port: srv.Port, User: srv.User, PrivateKey: srv.ClientKey, HostKey: srv.HostKey})
	if err != nil {
		t.Fatalf("connect to test sshd: %v", err)
	}
	return &Target{Server: srv, client: c}
}

// SID returns a fixed test SID.
func (t *Target) SID() string { return "test-soul" }

// Exec runs a command on the test host.
func (t *Target) Exec(ctx context.Context, cmd module.Command) (module.ExecResult, error) {
	res, err := t.client.Exec(ctx, ssh.Command{Argv: cmd.Argv, Env: cmd.Env, Dir: cmd.Dir, Stdin: cmd.Stdin})
	return module.ExecResult{ExitCode: res.ExitCode, Stdout: res.Stdout, Stderr: res.Stderr}, err
}

// ReadKeeperFile serves Files.
func (t *Target) ReadKeeperFile(_ context.Context, name string) ([]byte, error) {
	b, ok := t.Files[name]
	if !ok {
		return nil, &module.Error{Code: "keeper_file.not_found", Message: name + " does not exist"}
	}
	return b, nil
}

// Run runs m with params on t.
func Run(t testing.TB, m module.Module, target module.Target, params map[string]any) (module.Result, error) {
	t.Helper()
	return RunWith(t, m, module.RunInfo{}, target, params)
}

// RunWith runs m with params on t as part of the run run describes.
func RunWith(t testing.TB, m module.Module, run module.RunInfo, target module.Target, params map[string]any) (module.Result, error) {
	t.Helper()
	raw, err := json.Marshal(module.ApplyDefaults(m.Info(), params))
	if err != nil {
		t.Fatal(err)
	}
	return m.Run(context.Background(), run, raw, target)
}

// Sh runs a shell command on the target and returns its stdout.
func (t *Target) Sh(tb testing.TB, script string) string {
	tb.Helper()
	res, err := t.Exec(context.Background(), module.Command{Argv: []string{"/bin/sh", "-c", script}})
	if err != nil || res.ExitCode != 0 {
		tb.Fatalf("%s: %v (exit %d) %s", script, err, res.ExitCode, res.Stderr)
	}
	return string(res.Stdout)
}
