package keeper_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/driversdk"
	"github.com/soulstack/soulstack/internal/plugin"
)

// installHosts is how many local VMs BenchmarkInstallIdempotent10 runs on.
const installHosts = 10

// installPackages are the packages of the benchmark's core.pkg.installed
// step. The VMs' root is an overlay over this host's /, so they have
// whatever the host has; the benchmark checks with dpkg-query that the host
// has them all before it starts.
var installPackages = []string{"bash", "coreutils", "curl", "git", "openssh-server"}

// installSteps are the steps of installScenario, in order.
var installSteps = []string{"packages", "docker", "postgres"}

// installScenario installs packages, Docker and PostgreSQL on the listed
// souls, as examples/spawn-and-install.yaml does once its VMs exist.
// Docker is verified by the engine answering docker info (verify: daemon):
// the VMs have no hello-world image, and this host has a docker CLI but
// no engine, so the first run installs Debian's docker.io in every VM
// (profile key nesting: docker lets it run there).
const installScenario = `name: install-idempotent
description: Packages, Docker and PostgreSQL on the listed souls.
inputs:
  hosts: {type: list}
  packages: {type: list}
  pg_db_password: {type: string, secret: true}
steps:
  - name: packages
    on: "${ input.hosts }"
    module: core.pkg.installed
    params:
      packages: "${ input.packages }"
  - name: docker
    on: "${ input.hosts }"
    module: core.docker.installed
    params:
      source: distro
      compose: false
      verify: daemon
  - name: postgres
    on: "${ input.hosts }"
    module: core.postgres.installed
    params:
      db_name: app
      db_user: app
      db_password: "${ input.pg_db_password }"
`

// provisionScenario makes the benchmark's VMs.
const provisionScenario = `name: install-bench-vms
steps:
  - name: provision
    on: keeper
    module: core.cloud.created
    params: {provider: local, profile: small, count: 10}
`

// BenchmarkInstallIdempotent10 re-runs packages (5 packages the host
// has), Docker and PostgreSQL on 10 local VMs (soul-cloud-local) through
// a keeper started in this process, when everything is already in place:
// every timed run must succeed with every target ok (unchanged).
//
// Before the timer: the keeper starts on SQLite with the local driver
// built into its plugin directory, a run of core.cloud.created makes the
// 10 VMs (1 CPU, 512 MB each), and the install scenario runs once, which
// creates the PostgreSQL cluster, role and database in every VM. Each
// timed iteration submits the same scenario with a new key and follows its
// events until the run has finished; ns/op and run-s/op are that
// submit-to-finished wall time. The VMs are destroyed when the benchmark
// ends.
//
// Metrics: keeper-cpu-s/op, the CPU time of this process during the run
// (the keeper and the client; the VMs' sshd, shells and PostgreSQL are
// not counted); packages-s/op, docker-s/op and postgres-s/op, each step
// from its step.started to its step.finished event (the first includes
// connecting to every VM), with each target's own time (target.result
// duration_ms) in the log; pickup-ms/op, from the run's creation to its
// claim by a queue worker; finish-ms/op, from the last step's end to the
// run's end; conns/host/op, the SSH connections each VM's
// sshd accepted per run, counted in its log; and, when strace(1) is
// available, rt/host/<step>: the most SSH sessions (round trips) any VM's
// sshd started for the step (each VM's count is logged), in one more run after the timed ones with strace
// following every VM's sshd (each session is one execve of the login shell
// with the transport's PID-marker command line, attributed to a step by
// its time).
func BenchmarkInstallIdempotent10(b *testing.B) {
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		b.Skipf("local VMs need root on Linux (running as uid %d on %s)", os.Geteuid(), runtime.GOOS)
	}
	if missing := missingHostPackages(installPackages); len(missing) > 0 {
		b.Skipf("the VMs' root is this host's /, which lacks %s", strings.Join(missing, ", "))
	}
	if _, err := os.Stat("/usr/bin/pg_ctlcluster"); err != nil {
		b.Skip("the VMs' root is this host's /, which has no PostgreSQL (/usr/bin/pg_ctlcluster)")
	}
	tmp := b.TempDir()
	data := filepath.Join(tmp, "keeper")
	buildLocalDriverTB(b, filepath.Join(data, "plugins"))
	state := filepath.Join(tmp, "local-state")
	if err := os.Mkdir(state, 0o700); err != nil {
		b.Fatal(err)
	}
	c := startFanoutKeeper(b, data, "")
	ctx := b.Context()
	const suffix = "install-bench.test"
	if _, err := c.ProviderCreate(ctx, client.ProviderCreate{Name: "local", Driver: "local", FQDNSuffix: suffix, Config: map[string]any{"state_dir": state, "allow_nesting": true}}); err != nil {
		b.Fatal(err)
	}
	if _, err := c.ProfileCreate(ctx, client.ProfileCreate{Name: "small", Provider: "local", Spec: map[string]any{"cpus": 1, "memory_mb": 512, "nesting": "docker"}}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { destroyLocalVMs(b, filepath.Join(data, "plugins"), suffix, state) })

	prov, _ := fanoutRun(b, c, client.RunCreate{Scenario: provisionScenario, File: "provision.yaml", Timeout: "5m", Key: fmt.Sprintf("install-vms-%d", time.Now().UnixNano())})
	if prov.Phase != "Succeeded" {
		b.Fatalf("provision run: %s %+v", prov.Phase, prov.Error)
	}
	vms, err := provisionedVMs(prov)
	if err != nil {
		b.Fatal(err)
	}
	hosts := make([]any, len(vms))
	for i, vm := range vms {
		hosts[i] = vm.SID
	}
	pkgs := make([]any, len(installPackages))
	for i, p := range installPackages {
		pkgs[i] = p
	}
	req := client.RunCreate{
		Scenario: installScenario, File: "install-idempotent.yaml", Timeout: "5m",
		Input: map[string]any{"hosts": hosts, "packages": pkgs, "pg_db_password": "bench-Secret-42"},
	}

	// The first run installs Docker's engine in every VM: minutes.
	req.Key = fmt.Sprintf("install-first-%d", time.Now().UnixNano())
	firstReq := req
	firstReq.Timeout = "30m"
	first, _ := fanoutRun(b, c, firstReq)
	if err := checkInstall(first, false); err != nil {
		b.Fatalf("first install run: %v", err)
	}

	var (
		wall, cpu, pickup, finish   time.Duration
		steps, targetSum, targetMax [3]time.Duration
		conns                       int
		n                           int
	)
	for b.Loop() {
		b.StopTimer()
		n++
		req.Key = fmt.Sprintf("install-%d-%d", time.Now().UnixNano(), n)
		before := acceptedConns(b, state, vms)
		b.StartTimer()

		cpu0 := cpuTime(b)
		start := time.Now()
		run, evs := fanoutRun(b, c, req)
		wall += time.Since(start)
		cpu += cpuTime(b) - cpu0

		b.StopTimer()
		if err := checkInstall(run, true); err != nil {
			b.Fatalf("run %d: %v", n, err)
		}
		bd, err := breakdown(run, evs)
		if err != nil {
			b.Fatalf("run %d: %v", n, err)
		}
		pickup += bd.pickup
		finish += bd.finish
		for i := range steps {
			steps[i] += bd.steps[i]
			targetSum[i] += bd.targetSum[i]
			targetMax[i] = max(targetMax[i], bd.targetMax[i])
		}
		conns += acceptedConns(b, state, vms) - before
		b.StartTimer()
	}
	b.StopTimer()

	f := float64(n)
	b.ReportMetric(wall.Seconds()/f, "run-s/op")
	b.ReportMetric(cpu.Seconds()/f, "keeper-cpu-s/op")
	b.ReportMetric(float64(pickup.Milliseconds())/f, "pickup-ms/op")
	for i, name := range installSteps {
		b.ReportMetric(steps[i].Seconds()/f, name+"-s/op")
		b.Logf("step %s: %.0f ms per run; a target's own time %.0f ms on average, %.0f ms at most",
			name, float64(steps[i].Milliseconds())/f, float64(targetSum[i].Milliseconds())/f/installHosts, float64(targetMax[i].Milliseconds()))
	}
	b.ReportMetric(float64(finish.Milliseconds())/f, "finish-ms/op")
	b.ReportMetric(float64(conns)/f/installHosts, "conns/host/op")

	strace, err := osexec.LookPath("strace")
	if err != nil {
		b.Log("no strace(1): round trips per step not counted")
		return
	}
	req.Key = fmt.Sprintf("install-counted-%d", time.Now().UnixNano())
	perStep, err := countRoundTrips(b, strace, c, req, state, vms)
	if err != nil {
		b.Fatalf("counted run: %v", err)
	}
	for i, name := range installSteps {
		lo, hi := slices.Min(perStep[i]), slices.Max(perStep[i])
		b.Logf("step %s: %d to %d SSH round trips per host (%v)", name, lo, hi, perStep[i])
		b.ReportMetric(float64(hi), "rt/host/"+name)
	}
}

// missingHostPackages returns the packages dpkg does not list as
// installed on this host (all of them when dpkg-query cannot run).
func missingHostPackages(pkgs []string) []string {
	out, err := osexec.Command("dpkg-query", append([]string{"-W", "-f", "${Package} ${db:Status-Status}\n"}, pkgs...)...).Output()
	if err != nil {
		return pkgs
	}
	have := map[string]bool{}
	for _, l := range strings.Split(string(out), "\n") {
		if name, status, ok := strings.Cut(l, " "); ok && status == "installed" {
			have[name] = true
		}
	}
	var missing []string
	for _, p := range pkgs {
		if !have[p] {
			missing = append(missing, p)
		}
	}
	return missing
}

// buildLocalDriverTB builds soul-cloud-local into dir.
func buildLocalDriverTB(tb testing.TB, dir string) {
	tb.Helper()
	buildDriver(tb, dir, "local")
}

// destroyLocalVMs destroys every VM of the local driver's state dir,
// through a plugin host of its own, so that nothing is left behind
// whatever state the keeper is in.
func destroyLocalVMs(tb testing.TB, pluginDir, suffix, state string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := withLocalDriver(ctx, pluginDir, suffix, state, func(d driversdk.Driver, p driversdk.Provider) error {
		return destroyDriverVMs(ctx, d, p)
	}); err != nil {
		tb.Errorf("destroy VMs: %v", err)
	}
}

// withLocalDriver calls fn with the local driver, through a plugin host
// of its own, and the provider of state's VMs.
func withLocalDriver(ctx context.Context, pluginDir, suffix, state string, fn func(driversdk.Driver, driversdk.Provider) error) error {
	h, err := plugin.New(plugin.Config{PluginDir: pluginDir})
	if err != nil {
		return err
	}
	defer h.Close()
	d, err := h.Driver(ctx, "local")
	if err != nil {
		return err
	}
	cfg, _ := json.Marshal(map[string]string{"state_dir": state})
	return fn(d, driversdk.Provider{Name: "local", FQDNSuffix: suffix, Config: cfg})
}

// benchVM is one VM of the provision step's output.
type benchVM struct {
	SID  string `json:"sid"`
	VMID string `json:"vm_id"`
}

// provisionedVMs returns the VMs a provision run made.
func provisionedVMs(run *client.Run) ([]benchVM, error) {
	var outputs map[string]struct {
		Hosts []benchVM `json:"hosts"`
	}
	if err := json.Unmarshal(run.Outputs, &outputs); err != nil {
		return nil, fmt.Errorf("provision outputs: %w", err)
	}
	vms := outputs["provision"].Hosts
	if len(vms) != installHosts {
		return nil, fmt.Errorf("provision made %d VMs, want %d: %s", len(vms), installHosts, run.Outputs)
	}
	return vms, nil
}

// checkInstall checks that the run succeeded on every soul in every step;
// rerun requires every target to be ok (unchanged).
func checkInstall(run *client.Run, rerun bool) error {
	if run.Phase != "Succeeded" {
		msg := ""
		if run.Error != nil {
			msg = run.Error.Code + ": " + run.Error.Message
		}
		return fmt.Errorf("phase %s, want Succeeded: %s %+v", run.Phase, msg, run.Steps)
	}
	if len(run.Steps) != len(installSteps) {
		return fmt.Errorf("%d steps, want %d", len(run.Steps), len(installSteps))
	}
	for _, st := range run.Steps {
		if len(st.Targets) != installHosts {
			return fmt.Errorf("step %s: %d targets, want %d", st.Name, len(st.Targets), installHosts)
		}
		for _, t := range st.Targets {
			switch {
			case rerun && t.Status != "ok":
				return fmt.Errorf("step %s on %s: %s, want ok on a re-run (output %s, error %+v)", st.Name, t.SID, t.Status, t.Output, t.Error)
			case t.Status != "ok" && t.Status != "changed":
				return fmt.Errorf("step %s on %s: %s (error: %+v)", st.Name, t.SID, t.Status, t.Error)
			}
		}
	}
	return nil
}

// stepWindows returns each step's step.started and step.finished times.
func stepWindows(evs []client.RunEvent) ([3][2]time.Time, error) {
	var w [3][2]time.Time
	for _, e := range evs {
		i := slices.Index(installSteps, e.Step)
		if i < 0 {
			continue
		}
		switch e.Kind {
		case "step.started":
			w[i][0] = e.At
		case "step.finished":
			w[i][1] = e.At
		}
	}
	for i, name := range installSteps {
		if w[i][0].IsZero() || w[i][1].IsZero() {
			return w, fmt.Errorf("step %s has no step.started or step.finished event", name)
		}
	}
	return w, nil
}

// sshdLog is where a local VM's sshd logs, in the VM's upper layer: the
// /var layer's own on a view of the host, the root's on a base.
func sshdLog(state, vmID string) string {
	vm := filepath.Join(state, "vms", vmID)
	if p := filepath.Join(vm, "layers", "var", "upper", "log", "soulstack-local-sshd.log"); fileExists(p) {
		return p
	}
	return filepath.Join(vm, "upper", "var", "log", "soulstack-local-sshd.log")
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// acceptedConns counts the connections the VMs' sshd accepted so far.
func acceptedConns(b *testing.B, state string, vms []benchVM) int {
	b.Helper()
	n := 0
	for _, vm := range vms {
		log, err := os.ReadFile(sshdLog(state, vm.VMID))
		if err != nil {
			b.Fatalf("sshd log of %s: %v", vm.SID, err)
		}
		n += bytes.Count(log, []byte("Accepted publickey for "))
	}
	return n
}

// sshdListener returns the PID of the sshd that the VM's init runs.
func sshdListener(state, vmID string) (int, error) {
	raw, err := os.ReadFile(filepath.Join(state, "vms", vmID, "vm.json"))
	if err != nil {
		return 0, err
	}
	var vm struct {
		PID int `json:"pid"`
	}
	if err := json.Unmarshal(raw, &vm); err != nil || vm.PID == 0 {
		return 0, fmt.Errorf("vm.json of %s names no init PID (%v)", vmID, err)
	}
	// The listener is the descendant of init started as sshd -D; it
	// rewrites its command line to "sshd: /usr/sbin/sshd -D ... [listener] ...".
	queue := []string{strconv.Itoa(vm.PID)}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		argv, err := os.ReadFile("/proc/" + p + "/cmdline")
		if err == nil && (bytes.HasPrefix(argv, []byte("/usr/sbin/sshd\x00-D\x00")) || bytes.HasPrefix(argv, []byte("sshd: /usr/sbin/sshd -D "))) {
			return strconv.Atoi(p)
		}
		tasks, _ := os.ReadDir("/proc/" + p + "/task")
		for _, task := range tasks {
			children, _ := os.ReadFile("/proc/" + p + "/task/" + task.Name() + "/children")
			queue = append(queue, strings.Fields(string(children))...)
		}
	}
	return 0, fmt.Errorf("VM %s (init %d) runs no sshd", vmID, vm.PID)
}

// countRoundTrips runs req once more, untimed, with strace(1) following
// each VM's sshd, and returns per step the SSH sessions each VM served
// during that step. A session of the SSH transport is exactly one execve
// of the login shell with "-c" and a command line that starts with the
// transport's PID marker.
func countRoundTrips(b *testing.B, strace string, c *client.Client, req client.RunCreate, state string, vms []benchVM) ([3][]int, error) {
	var perStep [3][]int
	dir := b.TempDir()
	type tracer struct {
		cmd      *osexec.Cmd
		out      string
		attached chan struct{} // closed when strace says it attached
		done     chan error
	}
	tracers := make([]*tracer, 0, len(vms))
	stopAll := func() {
		for _, t := range tracers {
			_ = t.cmd.Process.Signal(syscall.SIGINT)
			select {
			case <-t.done:
			case <-time.After(10 * time.Second):
				_ = t.cmd.Process.Kill()
				<-t.done
			}
		}
		tracers = nil
	}
	defer stopAll()
	for _, vm := range vms {
		pid, err := sshdListener(state, vm.VMID)
		if err != nil {
			return perStep, err
		}
		t := &tracer{out: filepath.Join(dir, vm.VMID+".trace"), attached: make(chan struct{}), done: make(chan error, 1)}
		t.cmd = osexec.Command(strace, "-f", "-ttt", "-e", "trace=execve", "-e", "signal=none", "-s", "40", "-o", t.out, "-p", strconv.Itoa(pid))
		stderr, err := t.cmd.StderrPipe()
		if err != nil {
			return perStep, err
		}
		if err := t.cmd.Start(); err != nil {
			return perStep, fmt.Errorf("strace: %w", err)
		}
		tracers = append(tracers, t)
		go func() {
			var msgs strings.Builder
			sc := bufio.NewScanner(stderr)
			attached := false
			for sc.Scan() {
				if !attached && strings.Contains(sc.Text(), " attached") {
					attached = true
					close(t.attached)
				}
				msgs.WriteString(sc.Text() + "\n")
			}
			err := t.cmd.Wait()
			if err != nil {
				err = fmt.Errorf("strace -p %d: %w: %s", pid, err, msgs.String())
			}
			t.done <- err
		}()
	}
	for _, t := range tracers {
		select {
		case <-t.attached:
		case err := <-t.done:
			t.done <- err // for stopAll
			return perStep, fmt.Errorf("strace ended before it attached: %v", err)
		case <-time.After(10 * time.Second):
			return perStep, errors.New("strace did not attach within 10 s")
		}
	}

	run, evs := fanoutRun(b, c, req)
	if err := checkInstall(run, true); err != nil {
		return perStep, err
	}
	windows, err := stepWindows(evs)
	if err != nil {
		return perStep, err
	}
	done := tracers
	stopAll()
	for _, t := range done {
		counts, err := sessionsPerStep(t.out, windows)
		if err != nil {
			return perStep, err
		}
		if counts == [3]int{} {
			return perStep, fmt.Errorf("%s: no session seen", t.out)
		}
		for i := range perStep {
			perStep[i] = append(perStep[i], counts[i])
		}
	}
	return perStep, nil
}

// sessionsPerStep reads an strace -ttt -e trace=execve output and counts
// the transport's sessions in each step's window.
func sessionsPerStep(path string, windows [3][2]time.Time) ([3]int, error) {
	var counts [3]int
	f, err := os.Open(path)
	if err != nil {
		return counts, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, `"-c", "echo soulstack-pid-`) || strings.Contains(line, "= -1 ") {
			continue
		}
		fields := strings.Fields(line) // pid, seconds.micros, execve(...
		if len(fields) < 3 {
			continue
		}
		secs, err := strconv.ParseFloat(fields[1], 64)
		if err != nil {
			return counts, fmt.Errorf("%s: %q: %w", path, line, err)
		}
		at := time.Unix(0, int64(secs*1e9))
		matched := false
		for i, w := range windows {
			if !at.Before(w[0]) && !at.After(w[1]) {
				counts[i]++
				matched = true
			}
		}
		if !matched {
			return counts, fmt.Errorf("%s: a session at %v is outside every step", path, at)
		}
	}
	return counts, sc.Err()
}
