package bus_test

import (
	"fmt"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/base"

	"github.com/soulstack/soulstack/internal/bus"
	"github.com/soulstack/soulstack/internal/bus/bustest"
	"github.com/soulstack/soulstack/internal/transport"
)

// BenchmarkAgentFanout sends one no-op command to every one of N agents
// at once through the embedded server and waits for every answer: the
// bus's share of a step fanned out to N souls. The agents are simulated
// in 4 processes, each agent with its own certificate and NATS
// connection (admitted through the auth callout; each process starts one
// agent every 2 ms, 8 ms beyond 2,000 agents); they answer without
// spawning a process (noexec) or by running true(1) (exec). Reported:
// wall time per fan-out and the CPU time of this process (the keeper side:
// embedded NATS server, callout, presence, Conn) per target.
//
//	go test -run '^$' -bench BenchmarkAgentFanout -benchtime 5x ./internal/bus/
func BenchmarkAgentFanout(b *testing.B) {
	for _, n := range []int{1000, 2000, 10000} {
		for _, mode := range []string{"noexec", "exec"} {
			if n > 1000 && mode == "exec" {
				continue // 10,000 fork+exec on 2 cores measures the kernel
			}
			// 1k, 2k, 10k: no name is a prefix of another, so a filter
			// such as agents=1k/ selects one size only.
			b.Run(fmt.Sprintf("agents=%dk/%s", n/1000, mode), func(b *testing.B) {
				// Agents are started a few ms apart per process: 2,000 a
				// second in all up to 2,000 agents, 500 a second beyond
				// (see docs/performance.md on connection storms).
				stagger := 2 * time.Millisecond
				if n > 2000 {
					stagger = 8 * time.Millisecond
				}
				fanout(b, n, mode == "noexec", stagger, 0)
			})
		}
	}
}

// BenchmarkAgentStorm is BenchmarkAgentFanout's noexec fan-out with 4,000
// agents all started at the same moment (no stagger): the connection
// storm of a fleet booting, or reconnecting after a keeper restart. With
// jitter=none the agents connect at once and retry every second; with
// jitter=heartbeat (the agent's default) each waits a random delay up to
// its heartbeat interval (5 s) first and adds up to as much to each retry.
// The log line "agents connected and present in" is the connect time;
// the callout's busy refusals are reported.
//
//	go test -run '^$' -bench BenchmarkAgentStorm -benchtime 1x -timeout 30m ./internal/bus/
func BenchmarkAgentStorm(b *testing.B) {
	for _, j := range []struct {
		name   string
		jitter time.Duration
	}{{"none", -1}, {"heartbeat", 0}} {
		b.Run("agents=4k/jitter="+j.name, func(b *testing.B) { fanout(b, 4000, true, 0, j.jitter) })
	}
}

func fanout(b *testing.B, n int, noExec bool, stagger, jitter time.Duration) {
	ca := bustest.NewCA(b)
	reg := bustest.NewRegistry()
	srv, err := bus.Start(b.Context(), bus.Config{Base: base.Base{Log: benchLogger()}, Listen: "127.0.0.1:0", CA: ca.CA, ServerCert: ca.ServerCert, Identities: reg, Heartbeat: 5 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { srv.Close() })
	ids := make([]bustest.Identity, n)
	now := time.Now()
	for i := range ids {
		ids[i] = bustest.Issue(b, ca.CA, fmt.Sprintf("soul-%05d.bench.test", i), time.Hour, now)
		reg.Set(ids[i].SID, ids[i].Serial)
	}
	const procs = 4
	start := time.Now()
	for p := range procs {
		bustest.StartAgents(b, bustest.AgentSpec{URLs: srv.AgentURLs(), Identities: ids[p*n/procs : (p+1)*n/procs], Heartbeat: 5 * time.Second, NoExec: noExec, Stagger: stagger, Jitter: jitter})
	}
	bustest.WaitFor(b, 10*time.Minute, "every agent present", func() bool {
		for i := len(ids) - 1; i >= 0; i-- {
			if !srv.Present(ids[i].SID) {
				return false
			}
		}
		return true
	})
	connect := time.Since(start)
	b.Logf("%d agents connected and present in %v (callout: %d turned away busy, %d refused)", n, connect.Round(time.Millisecond), srv.Busy(), srv.Refused())
	conns := make([]transport.Conn, n)
	for i, id := range ids {
		conns[i], _ = srv.Agent(id.SID)
	}
	var cpu time.Duration
	b.ResetTimer()
	for range b.N {
		before := cpuTime()
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for _, c := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := c.Exec(b.Context(), transport.Command{Argv: []string{"true"}})
				if err == nil && res.ExitCode != 0 {
					err = fmt.Errorf("exit %d", res.ExitCode)
				}
				if err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		cpu += cpuTime() - before
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N*n), "keeper-cpu-µs/target")
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "wall-ms/fanout")
	b.ReportMetric(connect.Seconds(), "connect-s")
	b.ReportMetric(float64(srv.Busy()), "callout-busy")
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchLogger shows the bus's warnings (refusals, errors) on stderr.
func benchLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}
