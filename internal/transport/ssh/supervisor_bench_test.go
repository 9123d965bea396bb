package ssh

import (
	"fmt"
	"os/exec"
	"testing"
)

// BenchmarkSupervisor is what the durable-command supervisor costs on a
// host, without SSH: /bin/sh runs it (as a login shell runs the exec
// request) for `true` with no input, against BenchmarkPlainShell, the
// plain command line (the PID line, then exec).
//
//	go test ./internal/transport/ssh -run '^$' -bench 'BenchmarkSupervisor|BenchmarkPlainShell' -benchtime 200x
func BenchmarkSupervisor(b *testing.B) {
	spool := b.TempDir()
	for i := 0; i < b.N; i++ {
		cmd := exec.Command("/bin/sh", "-c", supervisorScript, "sh", "MK", spool, fmt.Sprint("cmd", i), "run_bench", "1", "digest", "16777216", "", "0", childScript, "0", "env LC_ALL=C true")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%v: %s", err, out)
		}
	}
}

func BenchmarkPlainShell(b *testing.B) {
	for i := 0; i < b.N; i++ {
		cmd := exec.Command("/bin/sh", "-c", "echo MK $$ >&2; exec env LC_ALL=C true")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%v: %s", err, out)
		}
	}
}
