package keeper_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/sshtest"
)

// fleetSouls is how many souls BenchmarkRunFleet registers in all.
const fleetSouls = 10_000

// BenchmarkRunFleet runs examples/fanout.yaml (3 steps) as an idempotent
// re-run on N real sshd hosts on loopback (SOULSTACK_BENCH_HOSTS, default
// 100: how many OpenSSH servers and their sessions this 2-core machine
// holds is the limit) through a keeper in this process whose registry
// holds 10,000 souls: the N reachable ones and idle ones registered
// through the API (never contacted).
//
// Metrics: run-s/op, submit to finished; keeper-cpu-s/op, the CPU time of
// this process during the run (keeper plus the small client, not sshd);
// cpu-us/host-step, that divided by N×3 target executions; rss-idle-MB,
// this process's RSS with the 10,000 souls registered and the keeper idle;
// rss-peak-MB, its peak RSS over the warm-up and timed runs.
//
//	SOULSTACK_BENCH_HOSTS=100 go test ./internal/keeper -run '^$' -bench BenchmarkRunFleet -benchtime 3x -timeout 30m
func BenchmarkRunFleet(b *testing.B) {
	hosts := 100
	if v := os.Getenv("SOULSTACK_BENCH_HOSTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > fleetSouls {
			b.Fatalf("SOULSTACK_BENCH_HOSTS=%q: want 1 to %d", v, fleetSouls)
		}
		hosts = n
	}
	src, err := os.ReadFile(filepath.Join("..", "..", "examples", "fanout.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	t0 := time.Now()
	servers := sshtest.StartN(b, hosts, sshtest.Options{})
	b.Logf("%d sshd started in %s", hosts, time.Since(t0).Round(time.Millisecond))
	tmp := b.TempDir()
	keyFile := filepath.Join(tmp, "id_ed25519")
	if err := os.WriteFile(keyFile, servers[0].ClientKey, 0o600); err != nil {
		b.Fatal(err)
	}
	workDir := filepath.Join(tmp, "souls")
	if err := os.Mkdir(workDir, 0o755); err != nil {
		b.Fatal(err)
	}
	c := startFanoutKeeper(b, filepath.Join(tmp, "keeper"), "")
	ctx := b.Context()

	// Register every soul: 4 clients in parallel, as an inventory import.
	t0 = time.Now()
	sids := make([]any, hosts)
	errs := make(chan error, 4)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := w; i < fleetSouls; i += 4 {
				in := client.SoulCreate{SID: fmt.Sprintf("idle-%05d.fleet.test", i), Address: "10.9.0.1",
					Connection: client.Connection{Transport: "ssh", User: "deploy", Port: 22, KeyRef: "file:" + keyFile},
					Attributes: map[string]any{"role": fmt.Sprintf("role-%d", i%10)}}
				if i < hosts {
					s := servers[i]
					in.SID, in.Address = fmt.Sprintf("h%05d.fleet.test", i), s.Addr
					in.Connection = client.Connection{Transport: "ssh", User: s.User, Port: s.Port, KeyRef: "file:" + keyFile}
					sids[i] = in.SID
				}
				if _, err := c.SoulCreate(ctx, in); err != nil {
					errs <- fmt.Errorf("register %s: %w", in.SID, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.Logf("%d souls registered in %s", fleetSouls, time.Since(t0).Round(time.Millisecond))

	req := client.RunCreate{Scenario: string(src), File: "fanout.yaml", Timeout: "10m",
		Input: map[string]any{"hosts": sids, "dir": workDir}}
	rssIdle := procStatusKB(b, "VmRSS")
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)

	req.Key = fmt.Sprintf("fleet-warm-%d", time.Now().UnixNano())
	t0 = time.Now()
	warm, _ := fanoutRun(b, c, req)
	if err := checkFleet(warm, hosts, false); err != nil {
		b.Fatalf("warm-up run: %v", err)
	}
	b.Logf("warm-up run (files created, host keys pinned) in %s", time.Since(t0).Round(time.Millisecond))

	var wall, cpu time.Duration
	n := 0
	for b.Loop() {
		n++
		req.Key = fmt.Sprintf("fleet-%d-%d", time.Now().UnixNano(), n)
		cpu0 := cpuTime(b)
		start := time.Now()
		run, _ := fanoutRun(b, c, req)
		wall += time.Since(start)
		cpu += cpuTime(b) - cpu0
		b.StopTimer()
		if err := checkFleet(run, hosts, true); err != nil {
			b.Fatalf("run %d: %v", n, err)
		}
		b.StartTimer()
	}
	f := float64(n)
	b.ReportMetric(float64(hosts), "hosts")
	b.ReportMetric(wall.Seconds()/f, "run-s/op")
	b.ReportMetric(cpu.Seconds()/f, "keeper-cpu-s/op")
	b.ReportMetric(float64(cpu.Microseconds())/f/float64(hosts*3), "cpu-us/host-step")
	b.ReportMetric(float64(rssIdle)/1024, "rss-idle-MB")
	b.ReportMetric(float64(procStatusKB(b, "VmHWM"))/1024, "rss-peak-MB")
}

// checkFleet checks that the run succeeded on every one of hosts souls; a
// re-run also changed nothing in the first two steps.
func checkFleet(run *client.Run, hosts int, rerun bool) error {
	if run.Phase != "Succeeded" {
		msg := ""
		if run.Error != nil {
			msg = run.Error.Code + ": " + run.Error.Message
		}
		return fmt.Errorf("phase %s, want Succeeded: %s", run.Phase, msg)
	}
	if len(run.Steps) != 3 {
		return fmt.Errorf("%d steps, want 3", len(run.Steps))
	}
	for i, st := range run.Steps {
		if len(st.Targets) != hosts {
			return fmt.Errorf("step %s: %d targets, want %d", st.Name, len(st.Targets), hosts)
		}
		for _, t := range st.Targets {
			if (rerun && i < 2 && t.Status != "ok") || (t.Status != "ok" && t.Status != "changed") {
				return fmt.Errorf("step %s on %s: %s (error: %+v)", st.Name, t.SID, t.Status, t.Error)
			}
		}
	}
	return nil
}
