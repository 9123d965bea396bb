package ssh

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// probeExec answers the readiness probe with a fixed result, or blocks
// until the context ends when block is set.
type probeExec struct {
	res   Result
	err   error
	block bool
	cmds  []Command
}

func (p *probeExec) Exec(ctx context.Context, cmd Command) (Result, error) {
	p.cmds = append(p.cmds, cmd)
	if p.block {
		<-ctx.Done()
		return Result{}, ctx.Err()
	}
	return p.res, p.err
}

// TestAwaitReady: the probe's answers map to ready, soul.cloud_init_failed
// (with the log lines) or soul.not_ready; the wait ends at the step's
// deadline as run.timeout, at the default bound as soul.not_ready, and on
// cancellation as the context's error. The probe never runs with sudo.
func TestAwaitReady(t *testing.T) {
	t.Parallel()
	out := func(s string) Result { return Result{Stdout: []byte(s)} }
	failedLong := "cloud-init 1\nstatus: error\nerrors:\n\t- runcmd: exited with 7\n--- /var/log/cloud-init-output.log\napt-get: mirror down\n"
	for _, tc := range []struct {
		name     string
		exec     *probeExec
		code     string // "" means ready
		contains []string
	}{
		{"done", &probeExec{res: out("cloud-init 0\n")}, "", nil},
		{"done with recoverable errors", &probeExec{res: out("cloud-init 2\n")}, "", nil},
		{"no cloud-init", &probeExec{res: out("absent\n")}, "", nil},
		{"failed", &probeExec{res: out(failedLong)}, CodeCloudInitFailed, []string{"status: error", "exited with 7", "apt-get: mirror down", "exited with 1"}},
		{"result.json clean", &probeExec{res: out(`result` + "\n" + `{"v1": {"datasource": "x", "errors": []}}`)}, "", nil},
		{"result.json with errors", &probeExec{res: out("result\n" + `{"v1": {"errors": ["scripts_user failed"]}}`)}, CodeCloudInitFailed, []string{"scripts_user failed"}},
		{"result.json garbled", &probeExec{res: out("result\n{")}, CodeNotReady, nil},
		{"no shell", &probeExec{res: Result{ExitCode: 127, Stderr: []byte("sh: not found")}}, CodeNotReady, []string{"127"}},
		{"default bound", &probeExec{block: true}, CodeNotReady, []string{"had not finished after 10ms"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := awaitReady(context.Background(), tc.exec, "vm-1.local.test", 10*time.Millisecond)
			if len(tc.exec.cmds) != 1 || tc.exec.cmds[0].Sudo || !strings.Contains(tc.exec.cmds[0].Script, "cloud-init status --wait") {
				t.Fatalf("probe commands = %+v, want one cloud-init status --wait without sudo", tc.exec.cmds)
			}
			if tc.code == "" {
				if err != nil {
					t.Fatalf("awaitReady = %v, want ready", err)
				}
				return
			}
			var me *ReadyError
			if !errors.As(err, &me) || me.Code != tc.code {
				t.Fatalf("awaitReady = %v, want code %s", err, tc.code)
			}
			for _, want := range tc.contains {
				if !strings.Contains(me.Message, want) {
					t.Errorf("message lacks %q:\n%s", want, me.Message)
				}
			}
		})
	}

	t.Run("step deadline", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		err := awaitReady(ctx, &probeExec{block: true}, "vm-1.local.test", time.Hour)
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "had not finished by the step's deadline") {
			t.Fatalf("awaitReady at the step's deadline = %v, want run.timeout", err)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		err := awaitReady(ctx, &probeExec{block: true}, "vm-1.local.test", time.Hour)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("awaitReady cancelled = %v, want run.cancelled", err)
		}
	})
}
