package keeper_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/config"
	"github.com/soulstack/soulstack/internal/keepertest"
	"github.com/soulstack/soulstack/internal/sshtest"
)

// fanoutHosts is how many souls BenchmarkRunFanout50 runs on.
const fanoutHosts = 50

// BenchmarkRunFanout50 runs examples/fanout.yaml — a command with a
// creates guard, a file already present and the command `true` — on 50
// local sshd hosts through a keeper started in this process, as an
// idempotent re-run: the warm-up run before the timer creates the files
// and pins the host keys, and every timed run must succeed with the first
// two steps ok (unchanged) on every soul.
//
// Each iteration first runs the baseline, untimed: 50 ssh(1) client
// processes in parallel, each a fresh curve25519-sha256 connection running
// `true`, on the same hosts. Then it submits the run (POST /v1/runs with a
// new key) and follows its event stream until the run has finished. ns/op
// and run-s/op are that submit-to-finished wall time.
//
// Metrics: openssh-s/op and run/openssh, the baseline and the ratio to it
// (the hosts share this machine's cores, so judge the ratio); keeper-cpu-s/op,
// the CPU time of this process during the run (the keeper plus the small
// client, not sshd or the baseline's ssh processes); rss-idle-MB, this
// process's RSS with the keeper idle and the souls registered, and
// rss-growth-MB, its peak RSS over the warm-up and the timed runs minus
// that; pickup-ms/op, from the run's creation to its claim by a queue
// worker (phase Running); guarded-s, managed-s and noop-s/op, each step
// from its step.started to its step.finished event (the first includes
// connecting to every soul); finish-ms/op, from the last step's end to
// the run's end; other-ms/op, the rest of the wall time (the POST, the
// checkpoints between steps, the event stream noticing the end).
//
// Three sub-benchmarks, side by side in one run: shell (ssh.executor: off,
// a session and a shell per command), executor (commands through `soul
// exec --stdio`, one per connection) and executor-recheck (the same with
// ssh.host_key_recheck: 1m, so that a run reuses the warm connections
// without proving each host key again).
func BenchmarkRunFanout50(b *testing.B) {
	for _, mode := range fanoutModes {
		b.Run(mode, func(b *testing.B) { runFanout(b, mode, fanoutHosts) })
	}
}

// BenchmarkRunFanout100 is BenchmarkRunFanout50 on 100 hosts.
//
//	go test ./internal/keeper -run '^$' -bench 'BenchmarkRunFanout100$' -benchtime 5x
func BenchmarkRunFanout100(b *testing.B) {
	for _, mode := range fanoutModes {
		b.Run(mode, func(b *testing.B) { runFanout(b, mode, 100) })
	}
}

// fanoutModes are the ways the fan-out benchmarks reach the hosts
// (fanoutFixture).
var fanoutModes = []string{"shell", "executor", "executor-recheck"}

// runFanout is the fan-out benchmark on hosts hosts, reached as mode says.
func runFanout(b *testing.B, mode string, hosts int) {
	sshBin, err := osexec.LookPath("ssh")
	if err != nil {
		b.Fatal("no ssh client for the baseline: apt-get install openssh-client")
	}
	servers, c, req, keyFile := fanoutFixture(b, mode, hosts)
	openssh := func(s *sshtest.Server) error {
		out, err := osexec.Command(sshBin, "-F", "/dev/null", "-i", keyFile,
			"-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
			"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
			"-o", "LogLevel=ERROR", "-o", "KexAlgorithms=curve25519-sha256",
			"-p", strconv.Itoa(s.Port), s.User+"@"+s.Addr, "true").CombinedOutput()
		if err != nil {
			return fmt.Errorf("ssh %s: %v: %s", s.HostPort(), err, out)
		}
		return nil
	}

	rssIdle := procStatusKB(b, "VmRSS")
	peakReset := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil

	req.Key = fmt.Sprintf("fanout-warm-%d", time.Now().UnixNano())
	warm, _ := fanoutRun(b, c, req)
	if err := checkFanout(warm, false, hosts); err != nil {
		b.Fatalf("warm-up run: %v", err)
	}

	var (
		base, wall, cpu, pickup, finish time.Duration
		other                           time.Duration
		steps, targetSum, targetMax     [3]time.Duration
		events                          int
		n                               int
	)
	for b.Loop() {
		b.StopTimer()
		start := time.Now()
		fanoutParallel(b, servers, openssh)
		base += time.Since(start)
		n++
		req.Key = fmt.Sprintf("fanout-%d-%d", time.Now().UnixNano(), n)
		b.StartTimer()

		cpu0 := cpuTime(b)
		start = time.Now()
		run, evs := fanoutRun(b, c, req)
		took := time.Since(start)
		wall += took
		cpu += cpuTime(b) - cpu0

		b.StopTimer()
		if err := checkFanout(run, true, hosts); err != nil {
			b.Fatalf("run %d: %v", n, err)
		}
		bd, err := breakdown(run, evs)
		if err != nil {
			b.Fatalf("run %d: %v", n, err)
		}
		pickup += bd.pickup
		finish += bd.finish
		other += took - bd.pickup - bd.finish
		for i := range steps {
			steps[i] += bd.steps[i]
			other -= bd.steps[i]
			targetSum[i] += bd.targetSum[i]
			targetMax[i] = max(targetMax[i], bd.targetMax[i])
		}
		events += len(evs)
		b.StartTimer()
	}
	rssPeak := procStatusKB(b, "VmHWM")
	if !peakReset {
		b.Log("cannot reset the peak RSS (/proc/self/clear_refs): rss-growth-MB counts from the process start")
	}

	f := float64(n)
	for i, name := range []string{"guarded", "managed", "noop"} {
		b.Logf("step %s: %.0f ms per run; a target's own time %.0f ms on average, %.0f ms at most",
			name, float64(steps[i].Milliseconds())/f, float64(targetSum[i].Milliseconds())/f/float64(hosts), float64(targetMax[i].Milliseconds()))
	}
	b.ReportMetric(wall.Seconds()/f, "run-s/op")
	b.ReportMetric(base.Seconds()/f, "openssh-s/op")
	b.ReportMetric(float64(wall)/float64(base), "run/openssh")
	b.ReportMetric(cpu.Seconds()/f, "keeper-cpu-s/op")
	b.ReportMetric(float64(rssIdle)/1024, "rss-idle-MB")
	b.ReportMetric(float64(rssPeak-rssIdle)/1024, "rss-growth-MB")
	b.ReportMetric(float64(pickup.Milliseconds())/f, "pickup-ms/op")
	b.ReportMetric(steps[0].Seconds()/f, "guarded-s/op")
	b.ReportMetric(steps[1].Seconds()/f, "managed-s/op")
	b.ReportMetric(steps[2].Seconds()/f, "noop-s/op")
	b.ReportMetric(float64(finish.Milliseconds())/f, "finish-ms/op")
	b.ReportMetric(float64(other.Milliseconds())/f, "other-ms/op")
	b.ReportMetric(float64(events)/f, "events/op")
}

// fanoutFixture starts n real sshd, a keeper in this process with
// a soul registered for each, and returns them with the request of
// examples/fanout.yaml on them (its files under the benchmark's temporary
// directory: the souls are this machine) and the client key's file.
//
// In mode executor the keeper serves the soul binary and its SSH
// connections run commands through it (ssh.executor: auto); in shell,
// through a shell each (off); executor-recheck is executor with
// ssh.host_key_recheck: 1m.
func fanoutFixture(b *testing.B, mode string, n int) ([]*sshtest.Server, *client.Client, client.RunCreate, string) {
	b.Helper()
	src, err := os.ReadFile(filepath.Join("..", "..", "examples", "fanout.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	servers := sshtest.StartN(b, n, sshtest.Options{})
	tmp := b.TempDir()
	keyFile := filepath.Join(tmp, "id_ed25519")
	if err := os.WriteFile(keyFile, servers[0].ClientKey, 0o600); err != nil {
		b.Fatal(err)
	}
	workDir := filepath.Join(tmp, "souls")
	if err := os.Mkdir(workDir, 0o755); err != nil {
		b.Fatal(err)
	}
	soul := ""
	if mode != "shell" {
		soul = bins.Path(b, "cmd/soul")
	}
	c := startFanoutKeeper(b, filepath.Join(tmp, "keeper"), soul, func(c *config.Config) {
		if mode == "executor-recheck" {
			c.SSH.HostKeyRecheck = config.Duration(time.Minute)
		}
	})
	hosts := make([]any, n)
	for i, s := range servers {
		sid := fmt.Sprintf("h%02d.bench.test", i+1)
		hosts[i] = sid
		_, err := c.SoulCreate(b.Context(), client.SoulCreate{
			SID: sid, Address: s.Addr,
			Connection: client.Connection{Transport: "ssh", User: s.User, Port: s.Port, KeyRef: "file:" + keyFile},
		})
		if err != nil {
			b.Fatalf("register %s: %v", sid, err)
		}
	}
	req := client.RunCreate{Scenario: string(src), File: "fanout.yaml", Timeout: "2m", Input: map[string]any{"hosts": hosts, "dir": workDir}}
	return servers, c, req, keyFile
}

// startFanoutKeeper runs a keeper in this process on a free loopback port
// with its SQLite registry in dataDir, and returns an admin client. With
// soul (a soul binary) its SSH connections run plain commands through it;
// without, through a shell each. The keeper stops when the benchmark ends;
// its warnings are shown if the benchmark fails.
func startFanoutKeeper(b *testing.B, dataDir, soul string, more ...func(*config.Config)) *client.Client {
	b.Helper()
	return keepertest.Start(b, func(c *config.Config) {
		c.DataDir, c.Log.Level = dataDir, "warn"
		c.AgentBinary, c.SSH.Executor = soul, "auto"
		if soul == "" {
			c.SSH.Executor = "off"
		}
		for _, f := range more {
			f(c)
		}
	}).Client
}

// fanoutRun submits a run, follows its events until it has finished and
// returns it with its events.
func fanoutRun(b *testing.B, c *client.Client, req client.RunCreate) (*client.Run, []client.RunEvent) {
	b.Helper()
	wait := 3 * time.Minute
	if d, err := time.ParseDuration(req.Timeout); err == nil && d+time.Minute > wait {
		wait = d + time.Minute // a run with a longer timeout of its own
	}
	ctx, cancel := context.WithTimeout(b.Context(), wait)
	defer cancel()
	run, _, err := c.RunCreate(ctx, req)
	if err != nil {
		b.Fatalf("create run: %v", err)
	}
	var evs []client.RunEvent
	if err := c.RunEvents(ctx, run.ID, 0, func(e client.RunEvent) error {
		evs = append(evs, e)
		return nil
	}); err != nil {
		b.Fatalf("events of %s: %v", run.ID, err)
	}
	if run, err = c.RunGet(ctx, run.ID); err != nil {
		b.Fatalf("get run: %v", err)
	}
	return run, evs
}

// checkFanout checks that the run succeeded on every soul; rerun also
// requires the first two steps to have changed nothing.
func checkFanout(run *client.Run, rerun bool, hosts int) error {
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
			switch {
			case rerun && i < 2 && t.Status != "ok":
				return fmt.Errorf("step %s on %s: %s, want ok on a re-run (error: %+v)", st.Name, t.SID, t.Status, t.Error)
			case t.Status != "ok" && t.Status != "changed":
				return fmt.Errorf("step %s on %s: %s (error: %+v)", st.Name, t.SID, t.Status, t.Error)
			}
		}
	}
	return nil
}

// runBreakdown is where one run's time went, from the keeper's timestamps.
type runBreakdown struct {
	pickup time.Duration    // created -> claimed (Running)
	steps  [3]time.Duration // step.started -> step.finished
	finish time.Duration    // last step.finished -> finished
	// targetSum and targetMax add up and bound the targets' own
	// durations (target.result duration_ms) in each step.
	targetSum, targetMax [3]time.Duration
}

func breakdown(run *client.Run, evs []client.RunEvent) (runBreakdown, error) {
	var bd runBreakdown
	if run.StartedAt == nil || run.FinishedAt == nil {
		return bd, errors.New("run has no start or finish time")
	}
	bd.pickup = run.StartedAt.Sub(run.CreatedAt)
	index := map[string]int{}
	for i, st := range run.Steps {
		index[st.Name] = i
	}
	var started [3]time.Time
	var last time.Time
	for _, e := range evs {
		i, ok := index[e.Step]
		if !ok || i >= len(started) {
			continue
		}
		switch e.Kind {
		case "step.started":
			started[i] = e.At
		case "step.finished":
			if started[i].IsZero() {
				return bd, fmt.Errorf("step %s finished before it started", e.Step)
			}
			bd.steps[i] = e.At.Sub(started[i])
			last = e.At
		case "target.result":
			var d struct {
				DurationMS int64 `json:"duration_ms"`
			}
			if err := json.Unmarshal(e.Data, &d); err != nil {
				return bd, fmt.Errorf("target.result of %s: %w", e.SID, err)
			}
			took := time.Duration(d.DurationMS) * time.Millisecond
			bd.targetSum[i] += took
			bd.targetMax[i] = max(bd.targetMax[i], took)
		}
	}
	if last.IsZero() {
		return bd, errors.New("no step.finished event")
	}
	bd.finish = run.FinishedAt.Sub(last)
	return bd, nil
}

// fanoutParallel runs f on every server at once and fails b on any error.
func fanoutParallel(b *testing.B, servers []*sshtest.Server, f func(*sshtest.Server) error) {
	b.Helper()
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i, s := range servers {
		wg.Go(func() { errs[i] = f(s) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}
}

// cpuTime is the user plus system CPU time of this process so far.
func cpuTime(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procStatusKB reads a kB field of /proc/self/status, such as VmRSS.
func procStatusKB(b *testing.B, field string) int64 {
	b.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), ":")
		if !ok || name != field {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
		if err != nil {
			b.Fatalf("/proc/self/status %s: %v", field, err)
		}
		return kb
	}
	b.Fatalf("/proc/self/status has no %s", field)
	return 0
}
