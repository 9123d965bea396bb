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

// BenchmarkFanout50 runs `true` on 50 local sshd hosts at once, three ways
// in each iteration, interleaved so that load from elsewhere on the machine
// hits them alike:
//
//   - openssh: the baseline, 50 ssh(1) client processes in parallel, each a
//     fresh connection with curve25519-sha256;
//   - pool-cold: a fresh Pool, so each host is dialed (TOFU) and the command
//     run over the new connection, as a run's first step does;
//   - pool-warm: the same Pool again, so only the commands cost, as a run's
//     later steps do.
//
// ns/op is the sum of the three; the per-way seconds and the ratios to the
// baseline are reported as metrics. The hosts share this machine's cores,
// so judge the ratios, not the absolute times.
//
// It logs in as root (bash, kept by sshtest from reading ~/.bashrc) and as
// an unprivileged account whose shell is /bin/sh, for which sshd adds a
// privilege-separated process per connection.
func BenchmarkFanout50(b *testing.B) {
	b.Run("login=root", func(b *testing.B) {
		if os.Geteuid() != 0 {
			b.Skip("needs root")
		}
		benchmarkFanout(b, "root")
	})
	b.Run("login=sh", func(b *testing.B) {
		benchmarkFanout(b, sshtest.NonRootUser(b))
	})
}

func benchmarkFanout(b *testing.B, user string) {
	const hosts = 50
	sshBin, err := osexec.LookPath("ssh")
	if err != nil {
		b.Fatal("no ssh client for the baseline: apt-get install openssh-client")
	}
	servers := sshtest.StartN(b, hosts, sshtest.Options{User: user})
	targets := make([]ssh.Target, hosts)
	for i, s := range servers {
		targets[i] = target(s)
		targets[i].ConnectTimeout = 0 // the default, as in production
	}
	key := filepath.Join(b.TempDir(), "id_ed25519")
	if err := os.WriteFile(key, servers[0].ClientKey, 0o600); err != nil {
		b.Fatal(err)
	}
	openssh := func(i int) error {
		s := servers[i]
		return osexec.Command(sshBin, "-F", "/dev/null", "-i", key,
			"-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
			"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
			"-o", "LogLevel=ERROR", "-o", "KexAlgorithms=curve25519-sha256",
			"-p", strconv.Itoa(s.Port), s.User+"@"+s.Addr, "true").Run()
	}

	var base, cold, warm time.Duration
	for b.Loop() {
		start := time.Now()
		fanout(b, hosts, openssh)
		base += time.Since(start)

		pool := ssh.NewPool(ssh.Options{})
		start = time.Now()
		fanout(b, hosts, func(i int) error { return runTrue(b.Context(), pool, targets[i]) })
		cold += time.Since(start)
		start = time.Now()
		fanout(b, hosts, func(i int) error { return runTrue(b.Context(), pool, targets[i]) })
		warm += time.Since(start)
		pool.Close()
	}
	n := float64(b.N)
	b.ReportMetric(base.Seconds()/n, "openssh-s/op")
	b.ReportMetric(cold.Seconds()/n, "pool-cold-s/op")
	b.ReportMetric(warm.Seconds()/n, "pool-warm-s/op")
	b.ReportMetric(float64(cold)/float64(base), "cold/openssh")
	b.ReportMetric(float64(warm)/float64(base), "warm/openssh")
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

// BenchmarkCheckHostKey compares, on one local sshd, what a run pays to
// reuse a warm connection (Pool.CheckHostKey: TCP and key exchange, no
// login) with what a cold connection costs (dial: key exchange, login)
// and with a keepalive over the open connection. Each sub-benchmark's
// ns/op is one of them, one at a time; the server's per-connection
// process start is in the first two.
func BenchmarkCheckHostKey(b *testing.B) {
	s := sshtest.Start(b, sshtest.Options{})
	tg := target(s)
	tg.HostKey = s.HostKey
	pool := ssh.NewPool(ssh.Options{IdleTimeout: time.Hour})
	defer pool.Close()
	b.Run("check", func(b *testing.B) {
		for b.Loop() {
			if err := pool.CheckHostKey(b.Context(), tg, s.HostKey); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("dial", func(b *testing.B) {
		for b.Loop() {
			c, err := ssh.Dial(b.Context(), tg, ssh.Options{})
			if err != nil {
				b.Fatal(err)
			}
			c.Close()
		}
	})
	b.Run("dial+exec", func(b *testing.B) {
		for b.Loop() {
			c, err := ssh.Dial(b.Context(), tg, ssh.Options{})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := c.Exec(b.Context(), ssh.Command{Argv: []string{"true"}}); err != nil {
				b.Fatal(err)
			}
			c.Close()
		}
	})
	b.Run("warm-exec", func(b *testing.B) {
		c, err := pool.Get(b.Context(), tg)
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, err := c.Exec(b.Context(), ssh.Command{Argv: []string{"true"}}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
