package ssh_test

import (
	"context"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/sshtest"
	"github.com/soulstack/soulstack/internal/transport/ssh"
)

// BenchmarkFanout50 runs `true` on 50 local sshd hosts at once:
//
//   - openssh: the baseline, 50 ssh(1) client processes in parallel, each a
//     fresh connection with curve25519-sha256;
//   - pool-cold: a fresh Pool per run, so each host is dialed (TOFU) and
//     the command run over it, as a run's first step does;
//   - pool-warm: one Pool across runs, so only the commands cost, as a
//     run's later steps do.
//
// The hosts share this machine's cores, so the figures to compare are the
// ratios reported by pool-cold (cold/openssh), not absolute times.
func BenchmarkFanout50(b *testing.B) {
	const hosts = 50
	servers := sshtest.StartN(b, hosts, sshtest.Options{})
	targets := make([]ssh.Target, hosts)
	for i, s := range servers {
		targets[i] = target(s)
	}
	perOp := map[string]time.Duration{}
	record := func(b *testing.B, name string) {
		perOp[name] = b.Elapsed() / time.Duration(b.N)
	}

	b.Run("openssh", func(b *testing.B) {
		ssh, err := osexec.LookPath("ssh")
		if err != nil {
			b.Skip("no ssh client (apt-get install openssh-client)")
		}
		key := filepath.Join(b.TempDir(), "id_ed25519")
		if err := os.WriteFile(key, servers[0].ClientKey, 0o600); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			fanout(b, hosts, func(i int) error {
				s := servers[i]
				return osexec.Command(ssh, "-F", "/dev/null", "-i", key,
					"-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
					"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
					"-o", "LogLevel=ERROR", "-o", "KexAlgorithms=curve25519-sha256",
					"-p", strconv.Itoa(s.Port), s.User+"@"+s.Addr, "true").Run()
			})
		}
		record(b, "openssh")
	})

	b.Run("pool-cold", func(b *testing.B) {
		for b.Loop() {
			pool := ssh.NewPool(ssh.Options{})
			fanout(b, hosts, func(i int) error { return runTrue(b.Context(), pool, targets[i]) })
			pool.Close()
		}
		record(b, "pool-cold")
		if base := perOp["openssh"]; base > 0 {
			b.ReportMetric(float64(perOp["pool-cold"])/float64(base), "x-openssh")
		}
	})

	b.Run("pool-warm", func(b *testing.B) {
		pool := ssh.NewPool(ssh.Options{})
		defer pool.Close()
		fanout(b, hosts, func(i int) error { return runTrue(b.Context(), pool, targets[i]) })
		for b.Loop() {
			fanout(b, hosts, func(i int) error { return runTrue(b.Context(), pool, targets[i]) })
		}
		record(b, "pool-warm")
		if base := perOp["openssh"]; base > 0 {
			b.ReportMetric(float64(perOp["pool-warm"])/float64(base), "x-openssh")
		}
	})
}

func runTrue(ctx context.Context, pool *ssh.Pool, t ssh.Target) error {
	c, err := pool.Get(ctx, t)
	if err != nil {
		return err
	}
	_, err = c.Exec(ctx, ssh.Command{Argv: []string{"true"}})
	return err
}

// fanout runs f for 0..n-1 in parallel and fails b on any error.
func fanout(b *testing.B, n int, f func(i int) error) {
	b.Helper()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = f(i) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			b.Fatalf("host %d: %v", i, err)
		}
	}
}
