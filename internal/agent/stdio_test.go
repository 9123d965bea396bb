package agent_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/soulstack/soulstack/internal/agent"
	"github.com/soulstack/soulstack/internal/agent/wire"
	"github.com/soulstack/soulstack/internal/probe"
	"github.com/soulstack/soulstack/internal/promtest"
)

func TestMain(m *testing.M) {
	agent.SuperviseIfAsked() // durable commands' supervisors are this binary
	os.Exit(m.Run())
}

// stdioExecutor is ServeStdio on pipes, as the keeper sees it over SSH.
type stdioExecutor struct {
	w    io.WriteCloser
	mu   sync.Mutex
	ends map[string]chan result
	done chan error
}

type result struct {
	stdout, stderr string
	end            wire.ExecEnd
}

func startStdio(tb testing.TB, spool string, metrics ...*agent.Metrics) *stdioExecutor {
	tb.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	x := &stdioExecutor{w: inW, ends: map[string]chan result{}, done: make(chan error, 1)}
	go func() {
		cfg := agent.StdioConfig{Spool: spool}
		if len(metrics) > 0 {
			cfg.Metrics = metrics[0]
		}
		x.done <- agent.ServeStdio(context.Background(), inR, outW, cfg)
		outW.Close()
	}()
	r := bufio.NewReader(outR)
	hello, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(hello, wire.StdioHello+" ") {
		tb.Fatalf("hello = %q, %v", hello, err)
	}
	go func() {
		parts := map[string]*result{}
		for {
			kind, id, body, err := wire.ReadFrame(r, 0)
			if err != nil {
				return
			}
			p := parts[id]
			if p == nil {
				p = &result{}
				parts[id] = p
			}
			switch kind {
			case wire.FrameStdout:
				p.stdout += string(body)
			case wire.FrameStderr:
				p.stderr += string(body)
			case wire.FrameEnd:
				_ = json.Unmarshal(body, &p.end)
				delete(parts, id)
				x.mu.Lock()
				ch := x.ends[id]
				x.mu.Unlock()
				ch <- *p
			}
		}
	}()
	tb.Cleanup(func() { inW.Close(); <-x.done })
	return x
}

// send sends req and returns where its end arrives.
func (x *stdioExecutor) send(tb testing.TB, req wire.ExecRequest) chan result {
	tb.Helper()
	ch := make(chan result, 1)
	x.mu.Lock()
	x.ends[req.ID] = ch
	x.mu.Unlock()
	b, _ := json.Marshal(req)
	if err := wire.WriteFrame(x.w, wire.FrameExec, req.ID, b); err != nil {
		tb.Fatal(err)
	}
	return ch
}

func (x *stdioExecutor) cancel(tb testing.TB, id string) {
	tb.Helper()
	b, _ := json.Marshal(wire.CancelRequest{ID: id})
	if err := wire.WriteFrame(x.w, wire.FrameCancel, id, b); err != nil {
		tb.Fatal(err)
	}
}

func wait(tb testing.TB, ch chan result) result {
	tb.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(30 * time.Second):
		tb.Fatal("no end within 30 s")
	}
	return result{}
}

// TestServeStdio: commands sent as frames run concurrently and answer by
// id (output, exit code); a cancel kills one; a durable command runs
// under a supervisor of its own that outlives the executor: once its
// input ends the executor returns, the command finishes, and another
// executor on the same spool attaches to its outcome without running it
// again; a frame that breaks the framing ends the executor with an error.
func TestServeStdio(t *testing.T) {
	t.Parallel()
	spool := t.TempDir()
	x := startStdio(t, spool)
	slow := x.send(t, wire.ExecRequest{ID: "slow", Argv: []string{"sleep", "30"}})
	a := x.send(t, wire.ExecRequest{ID: "a", Script: "echo out; echo err >&2; exit 3"})
	b := x.send(t, wire.ExecRequest{ID: "b", Argv: []string{"cat"}, Stdin: []byte("in")})
	if r := wait(t, a); r.stdout != "out\n" || r.stderr != "err\n" || r.end.ExitCode != 3 {
		t.Fatalf("a = %+v", r)
	}
	if r := wait(t, b); r.stdout != "in" || r.end.ExitCode != 0 {
		t.Fatalf("b = %+v", r)
	}
	x.cancel(t, "slow")
	if r := wait(t, slow); !r.end.Cancelled || r.end.Signal != "KILL" {
		t.Fatalf("the cancelled command = %+v", r.end)
	}

	dir := t.TempDir()
	ledger, started := filepath.Join(dir, "ledger"), filepath.Join(dir, "started")
	durable := wire.ExecRequest{ID: "d1", Script: fmt.Sprintf("touch %s; sleep 1; echo ran >> %s; echo done", started, ledger),
		Durable: &wire.Durable{ID: "cmd-1", Run: "run_1", Epoch: 1, Digest: "dg"}}
	x2 := startStdio(t, spool)
	x2.send(t, durable)
	for i := 0; ; i++ {
		if _, err := os.Stat(started); err == nil {
			break
		}
		if i > 400 {
			t.Fatal("the durable command never started")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Its executor's input ends (the SSH session is gone): it returns at
	// once, the command goes on.
	x2.w.Close()
	select {
	case err := <-x2.done:
		if err != nil {
			t.Fatalf("executor = %v", err)
		}
		x2.done <- nil // for the cleanup
	case <-time.After(500 * time.Millisecond):
		t.Fatal("the executor waited for its durable command")
	}
	durable.ID = "d2"
	r := wait(t, x.send(t, durable))
	if !r.end.Reattached || r.stdout != "done\n" || r.end.Code != "" {
		t.Fatalf("attach from another executor = %+v", r)
	}
	if b, _ := os.ReadFile(ledger); string(b) != "ran\n" {
		t.Fatalf("ledger = %q, want the command once", b)
	}

	// Garbage on the wire ends the executor with an error.
	x3 := startStdio(t, "")
	x3.w.Write([]byte{0, 0, 0, 1, 'x'})
	if err := <-x3.done; err == nil {
		t.Fatal("a broken frame did not end the executor")
	}
	x3.done <- nil
}

// TestSupervisorCancel: an executor's durable commands share one
// supervisor; a cancel of one (a cancel file, then SIGUSR1) kills that
// command's process group alone and spools an outcome that says it was
// cancelled, whether it comes from the command's executor or from
// another that attached to the command after the first went. The
// supervisor exits once its executor has gone and its commands ended.
func TestSupervisorCancel(t *testing.T) {
	t.Parallel()
	spool := t.TempDir()
	durable := func(id, cmdID, script string) wire.ExecRequest {
		return wire.ExecRequest{ID: id, Script: script, Durable: &wire.Durable{ID: cmdID, Run: "run_c", Epoch: 1, Digest: "d-" + cmdID}}
	}
	cancel := func(x *stdioExecutor, id string) {
		b, _ := json.Marshal(wire.CancelRequest{ID: id, Run: "run_c", Epoch: 1})
		if err := wire.WriteFrame(x.w, wire.FrameCancel, id, b); err != nil {
			t.Fatal(err)
		}
	}
	x := startStdio(t, spool)
	marks := t.TempDir()
	c := x.send(t, durable("c", "cancel-me", "touch "+marks+"/c; sleep 30"))
	keep := x.send(t, durable("k", "keep-me", "sleep 1; echo kept"))
	later := durable("l", "cancel-later", "touch "+marks+"/l; sleep 30")
	x.send(t, later)
	// Cancelled while they run (a cancel that comes first keeps a command
	// from starting at all).
	for _, m := range []string{"c", "l"} {
		waitFile(t, filepath.Join(marks, m))
	}
	sup := supervisorOf(t, spool, "cancel-me")
	for _, id := range []string{"keep-me", "cancel-later"} {
		if other := supervisorOf(t, spool, id); other != sup {
			t.Fatalf("%s runs under supervisor %d, cancel-me under %d: want one per executor", id, other, sup)
		}
	}
	cancel(x, "c")
	if r := wait(t, c); !r.end.Cancelled || r.end.Signal != "KILL" {
		t.Fatalf("cancelled durable command = %+v", r.end)
	}
	if r := wait(t, keep); r.end.Cancelled || r.end.ExitCode != 0 || r.stdout != "kept\n" {
		t.Fatalf("the command next to the cancelled one = %+v %q", r.end, r.stdout)
	}

	// Its executor goes; another attaches to the command left and
	// cancels it.
	x.w.Close()
	if err := <-x.done; err != nil {
		t.Fatalf("executor = %v", err)
	}
	x.done <- nil // for the cleanup
	x2 := startStdio(t, spool)
	later.ID = "l2"
	ch := x2.send(t, later)
	time.Sleep(200 * time.Millisecond) // the attach is made
	cancel(x2, "l2")
	if r := wait(t, ch); !r.end.Cancelled || r.end.Signal != "KILL" {
		t.Fatalf("a command cancelled by the executor that attached to it = %+v", r.end)
	}
	for i := 0; processAlive(sup); i++ {
		if i > 500 {
			t.Fatalf("supervisor %d still runs after its executor went and its commands ended", sup)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSupervisorKilled: the supervisor killed (kill -9) while its
// commands run: each is answered lost (run.command_lost), to its
// executor and to another that sends it again, and none runs again.
func TestSupervisorKilled(t *testing.T) {
	t.Parallel()
	spool, dir := t.TempDir(), t.TempDir()
	x := startStdio(t, spool)
	var reqs []wire.ExecRequest
	var ends []chan result
	for i := range 2 {
		req := wire.ExecRequest{ID: fmt.Sprint("k", i), Script: fmt.Sprintf("echo ran >> %s/ledger%d; echo $$ > %[1]s/pid%[2]d; exec sleep 30", dir, i),
			Durable: &wire.Durable{ID: fmt.Sprint("killed-", i), Run: "run_k", Epoch: 1, Digest: "d"}}
		reqs, ends = append(reqs, req), append(ends, x.send(t, req))
	}
	for i := range 2 {
		pid := pidIn(t, filepath.Join(dir, fmt.Sprint("pid", i)))
		t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) }) // the command outlives its supervisor
	}
	if err := syscall.Kill(supervisorOf(t, spool, "killed-1"), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for i, ch := range ends {
		if r := wait(t, ch); r.end.Code != wire.CodeLost {
			t.Fatalf("command %d after its supervisor was killed = %+v, want %s", i, r.end, wire.CodeLost)
		}
	}
	x2 := startStdio(t, spool)
	for i, req := range reqs {
		req.ID = fmt.Sprint("again", i)
		if r := wait(t, x2.send(t, req)); r.end.Code != wire.CodeLost {
			t.Fatalf("command %d sent again = %+v, want %s", i, r.end, wire.CodeLost)
		}
		if b, _ := os.ReadFile(filepath.Join(dir, fmt.Sprint("ledger", i))); string(b) != "ran\n" {
			t.Fatalf("ledger %d = %q, want the command once", i, b)
		}
	}
}

// pidIn waits for file to hold a PID and returns it.
func pidIn(t *testing.T, file string) int {
	t.Helper()
	for i := 0; ; i++ {
		b, _ := os.ReadFile(file)
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
			return pid
		}
		if i > 500 {
			t.Fatalf("no PID in %s", file)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitFile waits until file exists.
func waitFile(t *testing.T, file string) {
	t.Helper()
	for i := 0; ; i++ {
		if _, err := os.Stat(file); err == nil {
			return
		}
		if i > 500 {
			t.Fatalf("%s never appeared", file)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// supervisorOf is the PID of the supervisor running durable command id,
// once its entry records it.
func supervisorOf(t testing.TB, spool, id string) int {
	t.Helper()
	for i := 0; ; i++ {
		var sup struct{ PID int }
		b, err := os.ReadFile(filepath.Join(spool, id, "supervisor.json"))
		if err == nil && json.Unmarshal(b, &sup) == nil && sup.PID > 0 {
			return sup.PID
		}
		if i > 500 {
			t.Fatalf("no supervisor recorded for %s: %v", id, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// processAlive reports whether pid is a process that has not ended.
func processAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err == nil && !strings.Contains(string(b), ") Z ")
}

// BenchmarkStdio measures the executor's own cost per command on this
// host, through ServeStdio on pipes (no SSH): a plain command (`true`, a
// probe's fork and exec) and a durable one (its supervisor, this test
// binary, started with the first and kept, then `true`), back to back and
// spaced as a run's steps come to a host (10 ms apart, untimed).
// cpu-ms/op is this process's and its children's CPU per command: what
// the host pays, whatever the latency.
func BenchmarkStdio(b *testing.B) {
	for _, c := range []struct {
		name    string
		durable bool
		gap     time.Duration
	}{{"plain", false, 0}, {"durable", true, 0}, {"durable-spaced", true, 10 * time.Millisecond}} {
		b.Run(c.name, func(b *testing.B) {
			spool := b.TempDir()
			x := startStdio(b, spool)
			n := 0
			cpu0 := cpuTime()
			for b.Loop() {
				n++
				req := wire.ExecRequest{ID: fmt.Sprint("r", n), Argv: []string{"true"}}
				if c.durable {
					req.Durable = &wire.Durable{ID: fmt.Sprint("cmd-", n), Run: "run_b", Epoch: 1, Digest: "d"}
				}
				if r := wait(b, x.send(b, req)); r.end.ExitCode != 0 || r.end.Code != "" {
					b.Fatalf("%+v", r)
				}
				if c.gap > 0 {
					b.StopTimer()
					time.Sleep(c.gap)
					b.StartTimer()
				}
			}
			cpu := cpuTime() - cpu0
			if c.durable {
				cpu += processCPU(supervisorOf(b, spool, fmt.Sprint("cmd-", n)))
			}
			b.ReportMetric(float64(cpu.Microseconds())/1000/float64(n), "cpu-ms/op")
		})
	}
	// A module's probes, answered natively and by their scripts: a file's
	// state (this test binary, some MB to hash) and three packages.
	self, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	small := filepath.Join(b.TempDir(), "motd")
	if err := os.WriteFile(small, []byte("hello\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	probes := map[string][]string{
		probe.KindFileStat + "-small":  {probe.KindFileStat, small},
		probe.KindFileStat + "-binary": {probe.KindFileStat, self},
		probe.KindAptQuery:             {probe.KindAptQuery, "bash", "coreutils", "no-such-package"},
	}
	for name, p := range probes {
		for _, native := range []bool{true, false} {
			b.Run(fmt.Sprintf("%s/native=%v", name, native), func(b *testing.B) {
				x := startStdio(b, "")
				argv, req := probe.Command(p[0], p[1:]...)
				if !native {
					req = nil
				}
				n := 0
				for b.Loop() {
					n++
					if r := wait(b, x.send(b, wire.ExecRequest{ID: fmt.Sprint("p", n), Argv: argv, Probe: req})); r.end.ExitCode != 0 || r.stdout == "" {
						b.Fatalf("%+v", r)
					}
				}
			})
		}
	}
}

// TestProbeAnsweredInProcess: a probe is answered by the executor itself,
// with what its script would print, without running the script (here an
// argv that cannot run); a probe it cannot answer, and one that needs
// root where the executor is not root, run their argv.
func TestProbeAnsweredInProcess(t *testing.T) {
	x := startStdio(t, "")
	f := filepath.Join(t.TempDir(), "motd")
	if err := os.WriteFile(f, []byte("hello\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	argv, req := probe.Command(probe.KindFileStat, f)
	want, err := exec.Command(argv[0], argv[1:]...).Output()
	if err != nil {
		t.Fatal(err)
	}
	native := wait(t, x.send(t, wire.ExecRequest{ID: "p1", Argv: []string{"/nonexistent/shell"}, Probe: req}))
	if native.end.ExitCode != 0 || native.stdout != string(want) {
		t.Fatalf("probe answered %q (exit %d, %q), want the script's %q", native.stdout, native.end.ExitCode, native.stderr, want)
	}
	// A directory is the script's to answer (exit 3): the argv runs.
	_, dirReq := probe.Command(probe.KindFileStat, filepath.Dir(f))
	left := wait(t, x.send(t, wire.ExecRequest{ID: "p2", Argv: []string{"/nonexistent/shell"}, Probe: dirReq}))
	if left.end.ExitCode != 127 {
		t.Fatalf("a probe left to its argv: exit %d %q, want the argv's 127", left.end.ExitCode, left.stderr)
	}
	if os.Geteuid() != 0 {
		root := wait(t, x.send(t, wire.ExecRequest{ID: "p3", Argv: []string{"/nonexistent/shell"}, Probe: req, Sudo: true}))
		if root.end.ExitCode == 0 {
			t.Fatalf("a probe that needs root was answered by an executor that is not root: %q", root.stdout)
		}
	}
}

// processCPU is the CPU process pid and its waited-for children have
// used so far (fields 14-17 of /proc/<pid>/stat, in clock ticks); 0 once
// it has been waited for (its CPU is then its parent's children's).
func processCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	var ticks int64
	for _, v := range f[11:15] {
		n, _ := strconv.ParseInt(v, 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * time.Second / 100 // USER_HZ
}

// cpuTime is the CPU this process and its waited-for children used.
func cpuTime() time.Duration {
	var self, kids syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids)
	var d time.Duration
	for _, r := range []syscall.Rusage{self, kids} {
		d += time.Duration(r.Utime.Nano() + r.Stime.Nano())
	}
	return d
}

// TestMetricsCountCommands: the executor's metrics count each command
// by kind (plain, durable, probe) and result (ok, nonzero, refused), and
// time them.
func TestMetricsCountCommands(t *testing.T) {
	t.Parallel()
	m := agent.NewMetrics()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.Collectors()...)
	x := startStdio(t, t.TempDir(), m)
	f := filepath.Join(t.TempDir(), "motd")
	if err := os.WriteFile(f, []byte("hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	argv, probeReq := probe.Command(probe.KindFileStat, f)
	for _, req := range []wire.ExecRequest{
		{ID: "a", Argv: []string{"true"}},
		{ID: "b", Script: "exit 3"},
		{ID: "c", Argv: []string{"true"}, Durable: &wire.Durable{ID: "m-1", Run: "run_m", Epoch: 1, Digest: "d"}},
		{ID: "d", Argv: []string{"true"}, Durable: &wire.Durable{ID: "not a valid id", Run: "run_m", Epoch: 1, Digest: "d"}},
		{ID: "e", Argv: argv, Probe: probeReq},
	} {
		wait(t, x.send(t, req))
	}
	for series, want := range map[string]float64{
		`soulstack_agent_commands_total{kind="plain",result="ok"}`:        1,
		`soulstack_agent_commands_total{kind="plain",result="nonzero"}`:   1,
		`soulstack_agent_commands_total{kind="durable",result="ok"}`:      1,
		`soulstack_agent_commands_total{kind="durable",result="refused"}`: 1,
		`soulstack_agent_commands_total{kind="probe",result="ok"}`:        1,
		`soulstack_agent_command_duration_seconds_count{kind="plain"}`:    2,
	} {
		if got := promtest.Gathered(t, reg, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
}
