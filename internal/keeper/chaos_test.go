//go:build chaos

// The chaos suite: faults injected into real keeper, PostgreSQL, sshd and
// plugin processes. Run it with scripts/chaos (which prints the table of
// fault x outcome) or `go test -tags chaos -run '^TestChaos' ./internal/keeper/`.
// SOULSTACK_CHAOS_SEED fixes the random kill points; SOULSTACK_CHAOS_REPORT
// names a file each test appends its table rows to.

package keeper_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/bus/bustest"
	"github.com/soulstack/soulstack/internal/config"
	"github.com/soulstack/soulstack/internal/crashpoint"
	"github.com/soulstack/soulstack/internal/keepertest"
	"github.com/soulstack/soulstack/internal/notify"
	"github.com/soulstack/soulstack/internal/sshtest"
	"github.com/soulstack/soulstack/internal/testdb"
)

// chaosRow is one line of the fault x outcome table.
type chaosRow struct {
	Fault    string // what was injected
	Runs     int    // runs accepted
	Outcome  string // how they ended, by phase and code
	Keeper   string // what the keeper did
	Verdict  string // PASS or FAIL
	Duration time.Duration
}

var reportMu sync.Mutex

// report logs the row and appends it, tab-separated, to the file
// SOULSTACK_CHAOS_REPORT names.
func report(t *testing.T, row chaosRow) {
	t.Helper()
	row.Verdict = "PASS"
	if t.Failed() {
		row.Verdict = "FAIL"
	}
	line := strings.Join([]string{row.Fault, strconv.Itoa(row.Runs), row.Outcome, row.Keeper, row.Verdict, fmt.Sprintf("%.0fs", row.Duration.Seconds())}, "\t")
	t.Logf("chaos: %s", line)
	path := os.Getenv("SOULSTACK_CHAOS_REPORT")
	if path == "" {
		return
	}
	reportMu.Lock()
	defer reportMu.Unlock()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Errorf("chaos report: %v", err)
		return
	}
	defer f.Close()
	fmt.Fprintln(f, line)
}

// chaosSeed returns SOULSTACK_CHAOS_SEED, or a fresh seed; either way it
// is logged, so that a failing sequence of faults can be replayed.
func chaosSeed(t *testing.T) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("SOULSTACK_CHAOS_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("SOULSTACK_CHAOS_SEED=%q: %v", s, err)
		}
		seed = n
	}
	t.Logf("chaos seed %d (SOULSTACK_CHAOS_SEED=%d replays it)", seed, seed)
	return seed
}

// healthy reports whether the keeper answers /healthz with 200.
func healthy(k *proc) bool {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(k.Addr + "/healthz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// settle waits until every run is terminal (failing the test for any run
// still not terminal after within) and returns the final runs and a
// summary "N Phase[ code]" sorted by count. Every run must end in a phase
// allowed names ("Succeeded" or "Failed <code>"); an accepted run that is
// not found is lost and fails the test.
func settle(t *testing.T, c func() *client.Client, ids []string, within time.Duration, allowed ...string) (map[string]*client.Run, string) {
	t.Helper()
	final := map[string]*client.Run{}
	deadline := time.Now().Add(within)
	for len(final) < len(ids) && time.Now().Before(deadline) {
		for _, id := range ids {
			if final[id] != nil {
				continue
			}
			r, err := c().RunGet(context.Background(), id)
			if err != nil {
				var p *client.Problem
				if asProblem(err, &p) && p.Status == http.StatusNotFound {
					t.Errorf("run %s was accepted and is lost: %v", id, err)
					final[id] = &client.Run{ID: id, Phase: "Lost"}
				}
				continue
			}
			if client.Terminal(r.Phase) {
				final[id] = r
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	ok := map[string]bool{}
	for _, a := range allowed {
		ok[a] = true
	}
	counts := map[string]int{}
	for _, id := range ids {
		r := final[id]
		if r == nil {
			t.Errorf("run %s is not terminal %s after the fault", id, within)
			counts["not terminal"]++
			continue
		}
		key := string(r.Phase)
		if r.Error != nil && r.Error.Code != "" {
			key += " " + r.Error.Code
		}
		counts[key]++
		if !ok[key] && r.Phase != "Lost" {
			t.Errorf("run %s ended %s (%+v), want one of %v", id, key, r.Error, allowed)
		}
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return counts[keys[i]] > counts[keys[j]] || counts[keys[i]] == counts[keys[j]] && keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d %s", counts[k], k)
	}
	return final, strings.Join(parts, ", ")
}

func asProblem(err error, p **client.Problem) bool {
	x, ok := err.(*client.Problem)
	if ok {
		*p = x
	}
	return ok
}

// checkLedger checks that no command ran twice and that every command of
// a Succeeded run ran exactly once; tags maps run id to the tag its
// commands write.
func checkLedger(t *testing.T, path string, final map[string]*client.Run, tags map[string]string) {
	t.Helper()
	count := ledger(t, path)
	for line, n := range count {
		if n > 1 {
			t.Errorf("command %q ran %d times", line, n)
		}
	}
	for id, r := range final {
		if r.Phase != "Succeeded" {
			continue
		}
		for _, step := range []string{"first", "second"} {
			if count[tags[id]+" "+step] != 1 {
				t.Errorf("run %s succeeded but its command %q ran %d times", id, tags[id]+" "+step, count[tags[id]+" "+step])
			}
		}
	}
}

// TestChaosKill9Random kills the keeper with SIGKILL 20 times at random
// points (seeded) while runs are submitted and executing, restarting it
// each time. Every accepted run ends Succeeded: a command in flight at a
// kill goes on on the soul and the restarted keeper reattaches it; no
// command runs twice, and every command of every run ran exactly once.
func TestChaosKill9Random(t *testing.T) {
	t.Parallel()
	start := time.Now()
	rng := rand.New(rand.NewPCG(chaosSeed(t), 13))
	dir := t.TempDir()
	data := filepath.Join(dir, ".keeper")
	k := serve(t, dir)
	c := adminClient(t, k, data)
	srv := sshtest.Start(t, sshtest.Options{})
	addSoul(t, c, "h.local.test", srv)
	ledgerPath := filepath.Join(t.TempDir(), "ledger")
	sc := strings.ReplaceAll(fleetScenario(ledgerPath, "0.3"), "${ input.host }", "h.local.test")
	ids, tags := killLoop(t, rng, 20, func() *client.Client { return c }, sc, "h.local.test", func() {
		k = serve(t, dir)
		c = adminClient(t, k, data)
	}, func() *proc { return k })
	final, outcome := settle(t, func() *client.Client { return c }, ids, 120*time.Second, "Succeeded")
	checkLedger(t, ledgerPath, final, tags)
	keeper := fmt.Sprintf("restarted 20 times, answers /healthz; %d commands reattached", countReattached(t, c, ids))
	if !healthy(k) {
		t.Error("the keeper does not answer /healthz after the kills")
		keeper = "does not answer /healthz"
	}
	report(t, chaosRow{Fault: "keeper kill -9 x20 at random points", Runs: len(ids), Outcome: outcome, Keeper: keeper, Duration: time.Since(start)})
}

// TestChaosKill9Agent: as TestChaosKill9Random (10 kills), with the soul
// reached through its agent over the keeper's embedded bus (its SSH port
// is closed): a command in flight at a kill goes on under the agent, which
// spools its result; the restarted keeper's bus comes back on the same
// port, the agent reconnects, and the resumed run reattaches the command.
// Every accepted run ends Succeeded; every command ran exactly once.
func TestChaosKill9Agent(t *testing.T) {
	t.Parallel()
	start := time.Now()
	rng := rand.New(rand.NewPCG(chaosSeed(t), 15))
	const sid = "agent.local.test"
	ac := startAgentChaos(t, sid)
	dir, data, cfg, k, c := ac.dir, ac.data, ac.cfg, ac.k, ac.c
	ledgerPath := filepath.Join(t.TempDir(), "ledger")
	sc := strings.ReplaceAll(fleetScenario(ledgerPath, "0.3"), "${ input.host }", sid)
	ids, tags := killLoop(t, rng, 10, func() *client.Client { return c }, sc, sid, func() {
		k = serve(t, dir, "--config", cfg)
		c = adminClient(t, k, data)
	}, func() *proc { return k })
	final, outcome := settle(t, func() *client.Client { return c }, ids, 180*time.Second, "Succeeded")
	checkLedger(t, ledgerPath, final, tags)
	n := countReattached(t, c, ids)
	keeper := fmt.Sprintf("restarted 10 times; the agent reconnected each time; %d commands reattached through it", n)
	report(t, chaosRow{Fault: "keeper kill -9 x10, soul over the agent", Runs: len(ids), Outcome: outcome, Keeper: keeper, Duration: time.Since(start)})
}

// agentChaos is a keeper serving its embedded bus on a port of its own
// (heartbeats every 300 ms) and one soul reached through its agent.
type agentChaos struct {
	dir, data, cfg string
	k              *proc
	c              *client.Client
	agent          *bustest.Agents
	spec           bustest.AgentSpec
}

// startAgentChaos starts an agentChaos whose soul is sid.
func startAgentChaos(t *testing.T, sid string) agentChaos {
	t.Helper()
	ac := agentChaos{dir: t.TempDir()}
	ac.data = filepath.Join(ac.dir, ".keeper")
	port := freePort(t)
	ac.cfg = keeperConfig(t, ac.dir, fmt.Sprintf("nats:\n  listen: 127.0.0.1:%d\n  heartbeat: 300ms\n", port))
	ac.k = serve(t, ac.dir, "--config", ac.cfg)
	ac.c = adminClient(t, ac.k, ac.data)
	ac.agent, ac.spec = agentSoul(t, ac.c, config.Config{DataDir: ac.data}, sid, port, 300*time.Millisecond)
	return ac
}

// killLoop kills the keeper (keeper()) with SIGKILL kills times: before
// each kill it submits 1-3 runs of sc on host through c() and waits a
// random 0-1.5 s; after each it restarts the keeper (restart). It returns
// the runs and the ledger tag of each.
func killLoop(t *testing.T, rng *rand.Rand, kills int, c func() *client.Client, sc, host string, restart func(), keeper func() *proc) ([]string, map[string]string) {
	t.Helper()
	var ids []string
	tags := map[string]string{}
	for kill := 0; kill < kills; kill++ {
		for j := 0; j < 1+rng.IntN(3); j++ {
			tag := fmt.Sprintf("k%02d-%d", kill, j)
			run, _, err := c().RunCreate(context.Background(), client.RunCreate{Scenario: sc, Input: map[string]any{"tag": tag, "host": host}})
			if err != nil {
				t.Fatalf("submit %s: %v", tag, err)
			}
			ids = append(ids, run.ID)
			tags[run.ID] = tag
		}
		time.Sleep(time.Duration(rng.IntN(1500)) * time.Millisecond)
		k := keeper()
		if err := k.Cmd.Process.Kill(); err != nil { // the keeper this test started, by PID
			t.Fatal(err)
		}
		<-k.Done()
		restart()
	}
	return ids, tags
}

// privatePostgres is a PostgreSQL server of the test's own, which the
// test may stop and start.
type privatePostgres struct {
	bin, dir string
	port     int
	url      string
}

// pgBin finds the newest PostgreSQL server binaries.
func pgBin(t *testing.T) string {
	t.Helper()
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Strings(dirs)
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "initdb")); err == nil {
			return dirs[i]
		}
	}
	t.Fatal("no PostgreSQL server binaries under /usr/lib/postgresql (scripts/test installs them)")
	return ""
}

// startPostgres initialises and starts a PostgreSQL server on a free
// loopback port, run as the postgres user when the test runs as root
// (initdb refuses root); it is stopped and removed when the test ends.
func startPostgres(t *testing.T) *privatePostgres {
	t.Helper()
	dir, err := os.MkdirTemp("", "soulstack-chaos-pg-")
	if err != nil {
		t.Fatal(err)
	}
	p := &privatePostgres{dir: dir}
	t.Cleanup(func() {
		if p.port != 0 {
			_ = p.pg("stop", "-m", "immediate")
		}
		os.RemoveAll(dir)
	})
	p.bin, p.port = pgBin(t), freePort(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		if err := exec.Command("chown", "postgres", dir).Run(); err != nil {
			t.Fatalf("chown the PostgreSQL dir to postgres: %v", err)
		}
	}
	if out, err := p.as(filepath.Join(p.bin, "initdb"), "-D", filepath.Join(dir, "data"), "-U", "soulstack", "--auth=trust", "-E", "UTF8").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	// The free port may be taken before the server binds it (other tests
	// run meanwhile): try a few.
	for attempt := 0; ; attempt++ {
		err := p.pg("start")
		if err == nil {
			break
		}
		if attempt == 4 {
			log, _ := os.ReadFile(filepath.Join(dir, "server.log"))
			t.Fatalf("%v\n%s", err, log)
		}
		p.port = freePort(t)
	}
	p.url = fmt.Sprintf("postgres://soulstack@127.0.0.1:%d/postgres?sslmode=disable", p.port)
	return p
}

func (p *privatePostgres) as(name string, args ...string) *exec.Cmd {
	if os.Geteuid() == 0 {
		return exec.Command("runuser", append([]string{"-u", "postgres", "--", name}, args...)...)
	}
	return exec.Command(name, args...)
}

// pg runs pg_ctl action (start, stop, restart) and waits for it.
func (p *privatePostgres) pg(action string, args ...string) error {
	all := append([]string{"-D", filepath.Join(p.dir, "data"), "-l", filepath.Join(p.dir, "server.log"), "-w", "-t", "60",
		"-o", fmt.Sprintf("-c listen_addresses=127.0.0.1 -p %d -k %s -c fsync=off", p.port, p.dir), action}, args...)
	if out, err := p.as(filepath.Join(p.bin, "pg_ctl"), all...).CombinedOutput(); err != nil {
		return fmt.Errorf("pg_ctl %s: %v\n%s", action, err, out)
	}
	return nil
}

// TestChaosPostgresRestart stops the keeper's PostgreSQL for a few
// seconds while runs execute, then starts it again. The keeper keeps
// answering /healthz, and every run ends Succeeded or Failed with a
// precise code once the database is back.
func TestChaosPostgresRestart(t *testing.T) {
	t.Parallel()
	start := time.Now()
	pg := startPostgres(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	k := serve(t, dir, "--database-url", pg.url, "--data-dir", data)
	c := adminClient(t, k, data)
	srv := sshtest.Start(t, sshtest.Options{})
	addSoul(t, c, "h.local.test", srv)
	ledgerPath := filepath.Join(t.TempDir(), "ledger")
	sc := fleetScenario(ledgerPath, "1")
	var ids []string
	tags := map[string]string{}
	for i := 0; i < 10; i++ {
		tag := fmt.Sprintf("r%02d", i)
		run, _, err := c.RunCreate(context.Background(), client.RunCreate{Scenario: sc, Input: map[string]any{"tag": tag, "host": "h.local.test"}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, run.ID)
		tags[run.ID] = tag
	}
	waitFor(t, c, ids[0], "a step running", func(r *client.Run) bool { return stepRunning("first")(r) || stepRunning("second")(r) })
	if err := pg.pg("stop", "-m", "fast"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	keeper := "answered /healthz while the database was down"
	if !healthy(k) {
		keeper = "did not answer /healthz while the database was down"
		t.Error("the keeper does not answer /healthz while its database is down")
	}
	// A run submitted while the database is down is refused, not lost.
	_, _, downErr := c.RunCreate(context.Background(), client.RunCreate{Scenario: sc, Input: map[string]any{"tag": "down", "host": "h.local.test"}})
	if p, ok := downErr.(*client.Problem); !ok || p.Status != http.StatusServiceUnavailable || p.Code != "store.unavailable" {
		t.Errorf("submit while the database was down: %v, want 503 store.unavailable", downErr)
	}
	if err := pg.pg("start"); err != nil {
		t.Fatal(err)
	}
	final, outcome := settle(t, func() *client.Client { return c }, ids, 120*time.Second, "Succeeded", "Failed run.interrupted")
	checkLedger(t, ledgerPath, final, tags)
	if !healthy(k) {
		t.Error("the keeper does not answer /healthz after the database came back")
	}
	// And it works again.
	run, _, err := c.RunCreate(context.Background(), client.RunCreate{Scenario: sc, Input: map[string]any{"tag": "after", "host": "h.local.test"}})
	if err != nil {
		t.Fatalf("submit after the database came back: %v", err)
	}
	if r := waitFor(t, c, run.ID, "the run finishing", func(r *client.Run) bool { return client.Terminal(r.Phase) }); r.Phase != "Succeeded" {
		t.Errorf("run after the database came back = %s %+v", r.Phase, r.Error)
	}
	refused := "refused"
	if p, ok := downErr.(*client.Problem); ok {
		refused = fmt.Sprintf("refused %d %s", p.Status, p.Code)
	}
	if os.Getenv("CHAOS_DEBUG") != "" {
		t.Log(k.Drain())
	}
	report(t, chaosRow{Fault: "PostgreSQL stopped 3 s mid-run", Runs: len(ids), Outcome: outcome, Keeper: keeper + "; submit while down " + refused, Duration: time.Since(start)})
}

// TestChaosPluginCrashAndHang: the cloud driver plugin crashes (exits)
// during Create, or hangs in it. The run fails with the driver's precise
// code (driver.crashed) or the step's timeout (run.timeout), the keeper
// stays up, and the next run on a sane provider of the same driver
// succeeds (a new plugin process).
func TestChaosPluginCrashAndHang(t *testing.T) {
	t.Parallel()
	start := time.Now()
	k, c := fakeCloudKeeper(t, t.TempDir(), map[string]map[string]any{"crashes": {"crash": "Create"}, "hangs": {"hang": "Create"}, "sane": {}})
	ctx := context.Background()
	create := func(provider string) *client.Run {
		sc := "steps:\n  - name: make\n    on: keeper\n    module: core.cloud.created\n    timeout: 3s\n    params: {provider: " + provider + ", profile: {cpus: 1}}\n"
		run, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: sc})
		if err != nil {
			t.Fatal(err)
		}
		return waitFor(t, c, run.ID, "the run finishing", func(r *client.Run) bool { return client.Terminal(r.Phase) })
	}
	targetCode := func(r *client.Run) string {
		for _, s := range r.Steps {
			for _, tg := range s.Targets {
				if tg.Error != nil {
					return tg.Error.Code
				}
			}
		}
		return ""
	}
	var outcomes []string
	for _, tc := range []struct{ provider, want string }{{"crashes", "driver.crashed"}, {"hangs", "run.timeout"}, {"sane", ""}} {
		r := create(tc.provider)
		got := targetCode(r)
		switch {
		case tc.want == "" && r.Phase != "Succeeded":
			t.Errorf("create on %s after the faults = %s %+v", tc.provider, r.Phase, r.Error)
		case tc.want != "" && (r.Phase != "Failed" || got != tc.want):
			t.Errorf("create on %s = %s, target code %q, want Failed %s (%+v)", tc.provider, r.Phase, got, tc.want, r.Error)
		}
		if !healthy(k) {
			t.Errorf("the keeper does not answer /healthz after the plugin on %s", tc.provider)
		}
		outcomes = append(outcomes, fmt.Sprintf("%s: %s %s", tc.provider, r.Phase, got))
	}
	report(t, chaosRow{Fault: "plugin crash / hang during Create", Runs: 3, Outcome: strings.Join(outcomes, "; "), Keeper: "up; the next Create gets a new plugin process", Duration: time.Since(start)})
}

// TestChaosSSHCut kills the sshd process serving the keeper's connection
// while a command runs on it. The command goes on on the soul; the keeper
// redials and reattaches it (a command.reattached event, redialled), the
// run succeeds with its output, the command ran once, and the next run
// succeeds too.
func TestChaosSSHCut(t *testing.T) {
	t.Parallel()
	start := time.Now()
	dir := t.TempDir()
	data := filepath.Join(dir, ".keeper")
	k := serve(t, dir)
	c := adminClient(t, k, data)
	srv := sshtest.Start(t, sshtest.Options{})
	addSoul(t, c, "h.local.test", srv)
	marker := filepath.Join(t.TempDir(), "started")
	sc := "steps:\n  - name: long\n    on: h.local.test\n    module: core.command.ran\n    params: {cmd: 'echo started >> " + marker + "; sleep 3; echo done'}\n"
	ctx := context.Background()
	run, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: sc})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if b, _ := os.ReadFile(marker); len(b) > 0 {
			break
		}
		if i > 300 {
			t.Fatal("the command never started")
		}
		time.Sleep(100 * time.Millisecond)
	}
	pids := sshdSessions(t, srv)
	if len(pids) == 0 {
		t.Fatal("no sshd session process to kill")
	}
	cut := time.Now()
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL) // sshd session processes of the server this test started
	}
	final := waitFor(t, c, run.ID, "the run finishing", func(r *client.Run) bool { return client.Terminal(r.Phase) })
	took := time.Since(cut)
	if final.Phase != "Succeeded" || !strings.Contains(final.Message, "done") {
		t.Errorf("run with its SSH connection cut = %s %+v %s", final.Phase, final.Error, final.Message)
	}
	if b, _ := os.ReadFile(marker); string(b) != "started\n" {
		t.Errorf("the command ran %d times", strings.Count(string(b), "started"))
	}
	if got := reattached(t, c, run.ID); len(got) != 1 || got[0].Why != "redialled" {
		t.Errorf("command.reattached events = %+v, want one, redialled", got)
	}
	code := "reattached after a redial"
	again, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: "steps:\n  - name: again\n    on: h.local.test\n    module: core.command.ran\n    params: {cmd: 'true'}\n"})
	if err != nil {
		t.Fatal(err)
	}
	if r := waitFor(t, c, again.ID, "the run finishing", func(r *client.Run) bool { return client.Terminal(r.Phase) }); r.Phase != "Succeeded" {
		t.Errorf("the next run on the host = %s %+v", r.Phase, r.Error)
	}
	if !healthy(k) {
		t.Error("the keeper does not answer /healthz")
	}
	report(t, chaosRow{Fault: "SSH connection cut mid-command (sshd session killed)", Runs: 2,
		Outcome: fmt.Sprintf("cut run: %s, %s, %.1f s after the cut; the command ran once; next run: Succeeded", final.Phase, code, took.Seconds()), Keeper: "up", Duration: time.Since(start)})
}

// TestChaosSQLiteDiskFull fills the filesystem of the keeper's SQLite
// database (a small tmpfs) while runs are submitted and executing. The
// keeper stays up; a submission it cannot store is refused with a precise
// code, never accepted and lost; once space is freed every accepted run
// ends and new runs succeed.
func TestChaosSQLiteDiskFull(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the disk-full chaos test mounts a tmpfs: run it as root (scripts/chaos does)")
	}
	t.Parallel()
	start := time.Now()
	dir := t.TempDir()
	mnt := filepath.Join(dir, "small")
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=48m,mode=0700", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		// The keeper killed by serve's cleanup may not have exited yet.
		var out []byte
		var err error
		for i := 0; i < 50; i++ {
			if out, err = exec.Command("umount", mnt).CombinedOutput(); err == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("umount %s: %v\n%s", mnt, err, out)
		_ = exec.Command("umount", "-l", mnt).Run()
	})
	data := filepath.Join(mnt, "data")
	k := serve(t, dir, "--data-dir", data)
	c := adminClient(t, k, data)
	srv := sshtest.Start(t, sshtest.Options{})
	addSoul(t, c, "h.local.test", srv)
	ledgerPath := filepath.Join(t.TempDir(), "ledger")
	// The commands print 64 KiB each, which the keeper stores.
	sc := strings.ReplaceAll(fleetScenario(ledgerPath, "1.5"), "; echo ${ input.tag }", "; head -c 65536 /dev/zero | base64; echo ${ input.tag }")
	ctx := context.Background()
	var ids []string
	tags := map[string]string{}
	submit := func(tag string) error {
		run, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: sc, Input: map[string]any{"tag": tag, "host": "h.local.test"}})
		if err != nil {
			return err
		}
		ids = append(ids, run.ID)
		tags[run.ID] = tag
		return nil
	}
	for i := 0; i < 5; i++ {
		if err := submit(fmt.Sprintf("before%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, c, ids[0], "a step running", stepRunning("first"))
	// Fill the filesystem.
	filler := filepath.Join(mnt, "filler")
	if out, err := exec.Command("dd", "if=/dev/zero", "of="+filler, "bs=1M").CombinedOutput(); err == nil || !strings.Contains(string(out), "No space left") {
		t.Fatalf("dd did not fill the tmpfs: %v\n%s", err, out)
	}
	var refused []string
	for i := 0; i < 5; i++ {
		if err := submit(fmt.Sprintf("full%d", i)); err != nil {
			p, ok := err.(*client.Problem)
			if !ok {
				t.Errorf("submit on a full disk: %v (want a problem with a code)", err)
				continue
			}
			refused = append(refused, fmt.Sprintf("%d %s", p.Status, p.Code))
		}
		time.Sleep(300 * time.Millisecond)
	}
	time.Sleep(2 * time.Second)
	keeper := "answered /healthz on the full disk"
	if !healthy(k) {
		keeper = "did not answer /healthz on the full disk"
		t.Error("the keeper does not answer /healthz with its disk full")
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := submit("after"); err != nil {
		t.Fatalf("submit after space was freed: %v", err)
	}
	final, outcome := settle(t, func() *client.Client { return c }, ids, 120*time.Second, "Succeeded", "Failed run.interrupted")
	checkLedger(t, ledgerPath, final, tags)
	if r := final[ids[len(ids)-1]]; r == nil || r.Phase != "Succeeded" {
		t.Errorf("the run after space was freed = %+v", r)
	}
	sort.Strings(refused)
	logs := k.Interrupt(t)
	keeper += fmt.Sprintf("; %d run writes waited for space (retried)", strings.Count(logs, "database write failed; retrying"))
	report(t, chaosRow{Fault: "SQLite disk full (48 MB tmpfs)", Runs: len(ids), Outcome: outcome + fmt.Sprintf("; %d submissions refused on the full disk: %s", len(refused), strings.Join(refused, ", ")), Keeper: keeper, Duration: time.Since(start)})
}

// TestChaosSlowSoul: a host slower than the step's timeout. The step fails
// run.timeout at its timeout, the run is not left Running, and the host's
// next, quick step succeeds.
func TestChaosSlowSoul(t *testing.T) {
	t.Parallel()
	start := time.Now()
	dir := t.TempDir()
	data := filepath.Join(dir, ".keeper")
	k := serve(t, dir)
	c := adminClient(t, k, data)
	srv := sshtest.Start(t, sshtest.Options{})
	addSoul(t, c, "h.local.test", srv)
	sc := "steps:\n  - name: slow\n    on: h.local.test\n    module: core.command.ran\n    timeout: 2s\n    params: {cmd: 'sleep 30'}\n"
	ctx := context.Background()
	run, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: sc})
	if err != nil {
		t.Fatal(err)
	}
	final := waitFor(t, c, run.ID, "the run finishing", func(r *client.Run) bool { return client.Terminal(r.Phase) })
	code := ""
	for _, s := range final.Steps {
		for _, tg := range s.Targets {
			if tg.Error != nil {
				code = tg.Error.Code
			}
		}
	}
	if final.Phase != "Failed" || code != "run.timeout" {
		t.Errorf("slow run = %s, target code %q (%+v)", final.Phase, code, final.Error)
	}
	took := final.FinishedAt.Sub(*final.StartedAt)
	again, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: "steps:\n  - name: quick\n    on: h.local.test\n    module: core.command.ran\n    params: {cmd: 'true'}\n"})
	if err != nil {
		t.Fatal(err)
	}
	if r := waitFor(t, c, again.ID, "the run finishing", func(r *client.Run) bool { return client.Terminal(r.Phase) }); r.Phase != "Succeeded" {
		t.Errorf("the next run = %s %+v", r.Phase, r.Error)
	}
	if !healthy(k) {
		t.Error("the keeper does not answer /healthz")
	}
	report(t, chaosRow{Fault: "slow soul exceeds its 2 s step timeout", Runs: 2, Outcome: fmt.Sprintf("slow run: %s %s after %.1f s; next run Succeeded", final.Phase, code, took.Seconds()), Keeper: "up", Duration: time.Since(start)})
}

// TestChaosKill9FleetRandom: two keepers on one PostgreSQL; 10 times a
// randomly chosen keeper (seeded) is killed with SIGKILL at a random point
// while runs are submitted to both, and restarted. Runs move between the
// keepers through the queue and the leases, their commands reattached;
// every accepted run ends Succeeded, every command ran exactly once.
func TestChaosKill9FleetRandom(t *testing.T) {
	t.Parallel()
	start := time.Now()
	rng := rand.New(rand.NewPCG(chaosSeed(t), 14))
	var f *fleet
	if os.Getenv(testdb.EnvPostgres) != "" {
		f = newFleet(t, 2, "")
	} else { // scripts/chaos on its own: a server of the test's own
		f = newFleetOn(t, startPostgres(t).url, 2, "")
	}
	sids := f.hosts(2)
	ledgerPath := filepath.Join(t.TempDir(), "ledger")
	sc := fleetScenario(ledgerPath, "0.3")
	var ids []string
	tags := map[string]string{}
	const kills = 10
	for kill := 0; kill < kills; kill++ {
		for j := 0; j < 2+rng.IntN(3); j++ {
			tag := fmt.Sprintf("k%02d-%d", kill, j)
			run, _, err := f.client(j%2).RunCreate(context.Background(), client.RunCreate{Scenario: sc, Input: map[string]any{"tag": tag, "host": sids[j%2]}})
			if err != nil {
				t.Fatalf("submit %s: %v", tag, err)
			}
			ids = append(ids, run.ID)
			tags[run.ID] = tag
		}
		time.Sleep(time.Duration(rng.IntN(1500)) * time.Millisecond)
		victim := rng.IntN(2)
		f.kill9(victim)
		f.start(victim)
	}
	final, outcome := settle(t, func() *client.Client { return f.client(0) }, ids, 120*time.Second, "Succeeded")
	checkLedger(t, ledgerPath, final, tags)
	keeper := fmt.Sprintf("both restarted, answer /healthz; audit chain valid; %d commands reattached", countReattached(t, f.client(0), ids))
	for i := range f.procs {
		if !healthy(f.procs[i]) {
			t.Errorf("keeper %d does not answer /healthz after the kills", i)
			keeper = "a keeper does not answer /healthz"
		}
		f.procs[i].Interrupt(t)
	}
	f.verifyAudit(1)
	report(t, chaosRow{Fault: "kill -9 x10 of a random keeper of two on one PostgreSQL", Runs: len(ids), Outcome: outcome, Keeper: keeper, Duration: time.Since(start)})
}

// TestChaosKill9AfterRunFinish kills the keeper at the points a random
// kill rarely finds (SOULSTACK_TEST_CRASH_AT): a run's end has committed
// and nothing that follows it has happened yet (run-finished); a seed's
// change of drift state has committed and its notification is not yet
// queued (drift-recorded). What follows was queued in the same
// transaction (the run queue is the outbox), so the next keeper does it:
// a drift check's record (the seed is drifted, not left checking), the
// soul.drifted and soul.in_sync webhooks, a run's run.succeeded webhook.
// None is lost, and the run's command ran once.
func TestChaosKill9AfterRunFinish(t *testing.T) {
	t.Parallel()
	start := time.Now()
	dir := t.TempDir()
	data := filepath.Join(dir, ".keeper")
	secretFile := filepath.Join(dir, "hook.secret")
	if err := os.WriteFile(secretFile, []byte("outbox-hook-secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	hook := &receiver{secret: []byte("outbox-hook-secret")}
	hook.listen(t, "127.0.0.1:0")
	cfg := keeperConfig(t, dir, fmt.Sprintf("notifications:\n  - name: ops\n    url: http://%s/hook\n    events: [soul.drifted, soul.in_sync, run.succeeded]\n    secret_ref: file:%s\n",
		hook.srv.Addr, secretFile))
	crashing := func(at string) *proc {
		cmd := exec.Command(keeperBin, "serve", "--listen", "127.0.0.1:0", "--config", cfg)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), crashpoint.Env+"="+at)
		return keepertest.Run(t, cmd)
	}
	killed := func(k *proc) {
		t.Helper()
		select {
		case err := <-k.Done():
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("the keeper ended with %v, want SIGKILL at the crash point", err)
			}
		case <-time.After(60 * time.Second):
			t.Fatal("the keeper did not reach the crash point within 60 s")
		}
	}
	ctx := context.Background()

	// A drift check run ends, and the keeper dies before recording it.
	k := crashing(crashpoint.RunFinished)
	c := adminClient(t, k, data)
	srv := sshtest.Start(t, sshtest.Options{})
	addSoul(t, c, "h.outbox.test", srv)
	target := filepath.Join(t.TempDir(), "motd")
	if _, err := c.SeedAdd(ctx, "h.outbox.test", client.SeedCreate{Scenario: "inputs:\n  sid: {type: string}\nsteps:\n  - name: motd\n    on: \"${ input.sid }\"\n    module: core.file.present\n    params: {path: \"" + target + "\", content: \"seeded\\n\"}\n"}); err != nil {
		t.Fatal(err)
	}
	started, err := c.DriftChecks(ctx, client.DriftCheck{SIDs: []string{"h.outbox.test"}})
	if err != nil || len(started.Checks) != 1 {
		t.Fatalf("drift check: %+v, %v", started, err)
	}
	killed(k)
	if evs := hook.events(); len(evs) != 0 {
		t.Fatalf("deliveries before the keeper came back: %+v", evs)
	}
	k = serve(t, dir, "--config", cfg)
	c = adminClient(t, k, data)
	deadline := time.Now().Add(30 * time.Second)
	var rep *client.DriftReport
	for {
		rep, err = c.Drift(ctx, "", client.ListOptions{})
		if err == nil && len(rep.Items) == 1 && rep.Items[0].State == client.DriftDrifted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the drift check's record after the restart: %+v, %v; want drifted", rep, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got := rep.Items[0].Seeds[0].RunID; got != started.Checks[0].RunID {
		t.Errorf("drift recorded from run %s, want the check run %s", got, started.Checks[0].RunID)
	}

	waitHook := func(n int) []notify.Payload {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for len(hook.events()) < n && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		return hook.events()
	}
	if evs := waitHook(1); len(evs) != 1 || evs[0].Event != "soul.drifted" || evs[0].Object != "soul/h.outbox.test" {
		t.Fatalf("deliveries = %+v (refused %v), want soul.drifted of the soul", evs, hook.bad)
	}

	// The host gets what its seed says; the next check finds it in sync,
	// and the keeper dies once that change is recorded, before its
	// soul.in_sync webhook is queued.
	if err := os.WriteFile(target, []byte("seeded\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	k.Terminate(t)
	k = crashing(crashpoint.DriftRecorded)
	c = adminClient(t, k, data)
	if started, err = c.DriftChecks(ctx, client.DriftCheck{SIDs: []string{"h.outbox.test"}}); err != nil || len(started.Checks) != 1 {
		t.Fatalf("drift check: %+v, %v", started, err)
	}
	killed(k)
	k = serve(t, dir, "--config", cfg)
	c = adminClient(t, k, data)
	if evs := waitHook(2); len(evs) != 2 || evs[1].Event != "soul.in_sync" || evs[1].Object != "soul/h.outbox.test" {
		t.Fatalf("deliveries = %+v (refused %v), want soul.in_sync of the soul second", evs, hook.bad)
	}

	// A run ends, and the keeper dies before its webhook is queued.
	k.Terminate(t)
	k = crashing(crashpoint.RunFinished)
	c = adminClient(t, k, data)
	ledgerPath := filepath.Join(t.TempDir(), "ledger")
	run, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: "name: once\nsteps:\n  - name: first\n    on: h.outbox.test\n    module: core.command.ran\n    params: {cmd: \"echo once >> " + ledgerPath + "\"}\n"})
	if err != nil {
		t.Fatal(err)
	}
	killed(k)
	k = serve(t, dir, "--config", cfg)
	c = adminClient(t, k, data)
	if r := waitRun(t, c, run.ID); r.Phase != client.PhaseSucceeded {
		t.Fatalf("the run = %s %+v", r.Phase, r.Error)
	}
	if evs := waitHook(3); len(evs) != 3 || evs[2].Event != "run.succeeded" || evs[2].Object != "run/"+run.ID {
		t.Fatalf("deliveries = %+v (refused %v), want run.succeeded of %s third", evs, hook.bad, run.ID)
	}
	if got := ledger(t, ledgerPath); got["once"] != 1 {
		t.Errorf("the run's command ran %d times, want once", got["once"])
	}
	report(t, chaosRow{Fault: "keeper kill -9 after a run's end / a drift change, before what follows", Runs: 3,
		Outcome: "drift recorded, 3 webhooks delivered", Keeper: "restarted 3 times; the queued follow-ups ran", Duration: time.Since(start)})
}

// TestChaosKill9AgentMidCommand kills the soul's agent (SIGKILL) ten times
// at random points while runs execute on it, and starts it again (its
// identity and spool kept, as systemd's Restart=always would). Every run
// Succeeds and each command ran once: the commands went on under their
// supervisors, and the agent that came back attached to them.
func TestChaosKill9AgentMidCommand(t *testing.T) {
	t.Parallel()
	start := time.Now()
	rng := rand.New(rand.NewPCG(chaosSeed(t), 16))
	const sid = "agentkill.local.test"
	ac := startAgentChaos(t, sid)
	c, agent, spec := ac.c, ac.agent, ac.spec

	ledgerPath := filepath.Join(t.TempDir(), "ledger")
	sc := strings.ReplaceAll(fleetScenario(ledgerPath, "0.6"), "${ input.host }", sid)
	var ids []string
	tags := map[string]string{}
	for kill := 0; kill < 10; kill++ {
		for j := 0; j < 1+rng.IntN(2); j++ {
			tag := fmt.Sprintf("a%02d-%d", kill, j)
			run, _, err := c.RunCreate(context.Background(), client.RunCreate{Scenario: sc, Input: map[string]any{"tag": tag, "host": sid}})
			if err != nil {
				t.Fatalf("submit %s: %v", tag, err)
			}
			ids = append(ids, run.ID)
			tags[run.ID] = tag
		}
		time.Sleep(time.Duration(200+rng.IntN(1000)) * time.Millisecond)
		agent.Kill() // the agent process this test started
		agent = bustest.StartAgents(t, spec)
	}
	final, outcome := settle(t, func() *client.Client { return c }, ids, 180*time.Second, "Succeeded")
	checkLedger(t, ledgerPath, final, tags)
	n := countReattached(t, c, ids)
	report(t, chaosRow{Fault: "agent kill -9 x10 mid-command, soul over the agent", Runs: len(ids), Outcome: outcome,
		Keeper: fmt.Sprintf("up; the agent came back each time; %d commands reattached through it", n), Duration: time.Since(start)})
}

// TestChaosKill9Executor kills the executor the keeper started over SSH
// (soul exec --stdio, SIGKILL) five times while a run's command runs on the
// host. The connection stays; the keeper starts another executor on it,
// which attaches to the command (it went on under its supervisor). Every
// run Succeeds and each command ran once.
func TestChaosKill9Executor(t *testing.T) {
	t.Parallel()
	start := time.Now()
	rng := rand.New(rand.NewPCG(chaosSeed(t), 17))
	dir := t.TempDir()
	data := filepath.Join(dir, ".keeper")
	soul := buildSoul(t, t.TempDir())
	k := serve(t, dir, "--config", keeperConfig(t, dir, "agent_binary: "+soul+"\n"))
	c := adminClient(t, k, data)
	srv := sshtest.Start(t, sshtest.Options{})
	const sid = "executor.local.test"
	addSoul(t, c, sid, srv)
	ledgerPath := filepath.Join(t.TempDir(), "ledger")
	sc := strings.ReplaceAll(fleetScenario(ledgerPath, "1"), "${ input.host }", sid)
	var ids []string
	tags := map[string]string{}
	killed := 0
	for kill := 0; kill < 5; kill++ {
		tag := fmt.Sprintf("x%02d", kill)
		run, _, err := c.RunCreate(context.Background(), client.RunCreate{Scenario: sc, Input: map[string]any{"tag": tag, "host": sid}})
		if err != nil {
			t.Fatalf("submit %s: %v", tag, err)
		}
		ids = append(ids, run.ID)
		tags[run.ID] = tag
		time.Sleep(time.Duration(300+rng.IntN(600)) * time.Millisecond)
		for _, pid := range executorsOf(t, srv) {
			if syscall.Kill(pid, syscall.SIGKILL) == nil { // the executor of this test's sshd
				killed++
			}
		}
		waitFor(t, c, run.ID, "the run finishing", func(r *client.Run) bool { return client.Terminal(r.Phase) })
	}
	if killed == 0 {
		t.Fatal("no executor ran on the test's sshd: the keeper did not start one")
	}
	final, outcome := settle(t, func() *client.Client { return c }, ids, 120*time.Second, "Succeeded")
	checkLedger(t, ledgerPath, final, tags)
	n := countReattached(t, c, ids)
	report(t, chaosRow{Fault: "SSH executor (soul exec --stdio) kill -9 x5 mid-command", Runs: len(ids), Outcome: outcome,
		Keeper: fmt.Sprintf("up; %d executors killed, another started on the connection each time; %d commands reattached", killed, n), Duration: time.Since(start)})
}
