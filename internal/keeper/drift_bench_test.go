package keeper_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/bus/bustest"
	"github.com/soulstack/soulstack/internal/config"
)

// BenchmarkDriftSweep1000Agents times a drift sweep (POST /v1/drift/checks
// {all: true}) of N souls reached through their agents (real agent
// processes on the keeper's embedded NATS, four processes, each soul its
// own connection), each soul carrying one seed of three modules (a file,
// a guarded command, another file), until the keeper has recorded every
// soul's drift. N is SOULSTACK_BENCH_SOULS (default 1000).
//
// Metrics: sweep-s/op, from the request to the last soul recorded;
// keeper-cpu-ms/soul, the CPU time of this process (keeper, embedded
// NATS, client) per soul checked.
//
//	go test ./internal/keeper -run '^$' -bench BenchmarkDriftSweep1000Agents -benchtime 3x -timeout 30m
func BenchmarkDriftSweep1000Agents(b *testing.B) {
	n := 1000
	if v := os.Getenv("SOULSTACK_BENCH_SOULS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			b.Fatalf("SOULSTACK_BENCH_SOULS=%q", v)
		}
	}
	tmp := b.TempDir()
	k := startAgentKeeperWith(b, config.Config{Listen: "127.0.0.1:0", DataDir: filepath.Join(tmp, "keeper"), Log: config.Log{Level: "info"},
		NATS: config.NATS{Listen: "127.0.0.1:0"}})
	work := filepath.Join(tmp, "souls")
	if err := os.MkdirAll(work, 0o755); err != nil {
		b.Fatal(err)
	}
	seed := `inputs:
  sid: {type: string}
steps:
  - name: conf
    on: "${ input.sid }"
    module: core.file.present
    params: {path: "` + work + `/${ input.sid }.conf", content: "managed\n"}
  - name: marker
    on: "${ input.sid }"
    module: core.command.ran
    params: {cmd: "touch ` + work + `/${ input.sid }.done", creates: "` + work + `/${ input.sid }.done"}
  - name: motd
    on: "${ input.sid }"
    module: core.file.present
    params: {path: "` + work + `/${ input.sid }.motd", content: "hello\n"}
`
	ids := make([]bustest.Identity, n)
	for i := range n {
		sid := fmt.Sprintf("s%04d.drift.bench.test", i)
		ids[i] = k.soul(b, sid)
		if _, err := k.c.SeedAdd(b.Context(), sid, client.SeedCreate{Scenario: seed}); err != nil {
			b.Fatal(err)
		}
	}
	const procs = 4
	for p := range procs {
		bustest.StartAgents(b, bustest.AgentSpec{URLs: k.urls, Identities: ids[p*n/procs : (p+1)*n/procs], Heartbeat: 5 * time.Second})
	}
	bustest.WaitFor(b, 2*time.Minute, "every agent present", func() bool {
		return strings.Count(k.logs.String(), `msg="bus: agent present"`) >= n
	})
	sweep := func() time.Duration {
		start := time.Now()
		started, err := k.c.DriftChecks(b.Context(), client.DriftCheck{All: true})
		if err != nil || len(started.Checks) != n {
			b.Fatalf("sweep started %d checks, want %d: %v (skipped %v)", len(started.Checks), n, err, started.Skipped)
		}
		runs := map[string]bool{}
		for _, ch := range started.Checks {
			runs[ch.RunID] = true
		}
		bustest.WaitFor(b, 10*time.Minute, "every soul's drift recorded", func() bool {
			rep, err := k.c.Drift(b.Context(), "", client.ListOptions{Limit: 500})
			if err != nil {
				return false
			}
			done := 0
			after := ""
			for {
				for _, so := range rep.Items {
					for _, sd := range so.Seeds {
						if runs[sd.RunID] && sd.State != client.DriftChecking && sd.CheckedAt != nil && sd.CheckedAt.After(start) {
							done++
						}
					}
				}
				if rep.Next == "" || rep.Next == after {
					break
				}
				after = rep.Next
				if rep, err = k.c.Drift(b.Context(), "", client.ListOptions{Limit: 500, After: after}); err != nil {
					return false
				}
			}
			return done == n
		})
		return time.Since(start)
	}
	sweep() // warm-up: files made by nobody, every seed drifted (pending)
	var wall, cpu time.Duration
	iters := 0
	for b.Loop() {
		iters++
		c0 := cpuTime(b)
		wall += sweep()
		cpu += cpuTime(b) - c0
	}
	// Nothing made the seeds' files: every soul is drifted (pending), found
	// through its agent.
	rep, err := k.c.Drift(b.Context(), client.DriftDrifted, client.ListOptions{Limit: 1})
	if err != nil || rep.Counts[client.DriftDrifted] != n {
		b.Fatalf("drift counts %v, %v; want %d drifted", rep.Counts, err, n)
	}
	b.ReportMetric(wall.Seconds()/float64(iters), "sweep-s/op")
	b.ReportMetric(float64(cpu.Milliseconds())/float64(iters*n), "keeper-cpu-ms/soul")
}
