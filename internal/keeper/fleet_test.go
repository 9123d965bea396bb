package keeper_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the pgx database/sql driver

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/runner"
	"github.com/soulstack/soulstack/internal/sshtest"
	"github.com/soulstack/soulstack/internal/testdb"
)

// fleet is several keeper processes serving one PostgreSQL database, each
// with its own data dir and all with the same data key (hence audit key)
// and one shared audit checkpoint directory.
type fleet struct {
	t     testing.TB
	url   string
	dirs  []string // each keeper's working directory
	cfgs  []string // each keeper's keeper.yml
	procs []*proc
	ids   []string // each keeper's id (its run lease owner)
	token string   // the admin token the first keeper made
	db    *sql.DB
}

// newFleet starts n keepers on a fresh PostgreSQL database: the first
// alone, so that it migrates the database and makes the one admin token,
// then the others.
func newFleet(t testing.TB, n int, extraConfig string) *fleet {
	t.Helper()
	return newFleetOn(t, testdb.FreshPostgres(t), n, extraConfig)
}

// newFleetOn is newFleet on the empty PostgreSQL database url.
func newFleetOn(t testing.TB, url string, n int, extraConfig string) *fleet {
	t.Helper()
	f := &fleet{t: t, url: url}
	shared := t.TempDir()
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(shared, "data.key")
	if err := os.WriteFile(keyFile, []byte(base64.StdEncoding.EncodeToString(raw)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		dir := t.TempDir()
		cfg := filepath.Join(dir, "keeper.yml")
		text := fmt.Sprintf("database_url: %q\ndata_dir: %q\ndata_key_ref: %q\naudit_checkpoint_dir: %q\n%s",
			f.url, filepath.Join(dir, "data"), "file:"+keyFile, filepath.Join(shared, "audit"), extraConfig)
		if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		f.dirs, f.cfgs = append(f.dirs, dir), append(f.cfgs, cfg)
	}
	f.procs = make([]*proc, n)
	f.ids = make([]string, n)
	for i := 0; i < n; i++ {
		f.start(i)
		if i == 0 {
			b, err := os.ReadFile(filepath.Join(f.dirs[0], "data", "admin.token"))
			if err != nil {
				t.Fatal(err)
			}
			f.token = strings.TrimSpace(string(b))
		} else if _, err := os.Stat(filepath.Join(f.dirs[i], "data", "admin.token")); err == nil {
			t.Fatalf("keeper %d made a second admin token on a registry that has one", i)
		}
		b, err := os.ReadFile(filepath.Join(f.dirs[i], "data", "keeper.id"))
		if err != nil {
			t.Fatal(err)
		}
		f.ids[i] = strings.TrimSpace(string(b))
	}
	db, err := sql.Open("pgx", f.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	f.db = db
	return f
}

// start starts (or restarts) keeper i.
func (f *fleet) start(i int) *proc {
	f.t.Helper()
	f.procs[i] = serve(f.t, f.dirs[i], "--config", f.cfgs[i])
	return f.procs[i]
}

// client returns a client of keeper i.
func (f *fleet) client(i int) *client.Client {
	f.t.Helper()
	c, err := client.New(f.procs[i].Addr, f.token)
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}

// kill9 kills keeper i with SIGKILL and waits for it to be gone.
func (f *fleet) kill9(i int) {
	f.t.Helper()
	if err := f.procs[i].Cmd.Process.Kill(); err != nil { // the process this test started, by PID
		f.t.Fatal(err)
	}
	<-f.procs[i].Done()
}

// owner returns the keeper index holding run id's lease, -1 for none, and
// the run's phase, read from the database.
func (f *fleet) owner(id string) (int, string) {
	f.t.Helper()
	var owner sql.NullString
	var phase string
	if err := f.db.QueryRow(`SELECT owner, phase FROM runs WHERE id = $1`, id).Scan(&owner, &phase); err != nil {
		f.t.Fatal(err)
	}
	for i, k := range f.ids {
		if owner.String == k {
			return i, phase
		}
	}
	return -1, phase
}

// running lists the runs keeper i executes now, from the database.
func (f *fleet) running(i int) []string {
	f.t.Helper()
	rows, err := f.db.Query(`SELECT id FROM runs WHERE owner = $1 AND phase = 'Running' ORDER BY id`, f.ids[i])
	if err != nil {
		f.t.Fatal(err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			f.t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// verifyAudit runs `keeper audit verify` with keeper i's configuration
// against the shared database and checkpoint directory.
func (f *fleet) verifyAudit(i int) client.AuditReport {
	f.t.Helper()
	out, err := exec.Command(keeperBin, "audit", "verify", "--json", "--config", f.cfgs[i]).Output()
	var r client.AuditReport
	if jerr := json.Unmarshal(out, &r); jerr != nil || err != nil || !r.OK {
		f.t.Fatalf("keeper audit verify: %v %v\n%s", err, jerr, out)
	}
	return r
}

// waitTerminal waits until every run is terminal, asking the keepers in
// live round-robin, and returns the final runs.
func (f *fleet) waitTerminal(ids []string, live ...int) map[string]*client.Run {
	f.t.Helper()
	out := map[string]*client.Run{}
	deadline := time.Now().Add(180 * time.Second)
	for n := 0; len(out) < len(ids); n++ {
		if time.Now().After(deadline) {
			var left []string
			for _, id := range ids {
				if out[id] == nil {
					_, phase := f.owner(id)
					left = append(left, id+" "+phase)
				}
			}
			f.t.Fatalf("%d runs not terminal within 180 s: %v", len(left), left)
		}
		for _, id := range ids {
			if out[id] != nil {
				continue
			}
			r, err := f.client(live[n%len(live)]).RunGet(context.Background(), id)
			if err == nil && client.Terminal(r.Phase) {
				out[id] = r
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return out
}

// ledger counts the lines of the file every command appends to.
func ledger(t *testing.T, path string) map[string]int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if l != "" {
			count[l]++
		}
	}
	return count
}

// fleetScenario is two commands on host ${input.host}, each appending its
// run's tag and step to the ledger after a pause.
func fleetScenario(ledger string, pause string) string {
	return `inputs:
  tag: {type: string}
  host: {type: string}
steps:
  - name: first
    on: ${ input.host }
    module: core.command.ran
    params: {cmd: "sleep ` + pause + `; echo ${ input.tag } first >> ` + ledger + `"}
  - name: second
    on: ${ input.host }
    module: core.command.ran
    params: {cmd: "sleep ` + pause + `; echo ${ input.tag } second >> ` + ledger + `"}
`
}

// fleetHosts registers n real sshd hosts h0..h<n-1>.local.test through
// keeper 0 and returns their SIDs.
func (f *fleet) hosts(n int) []string {
	f.t.Helper()
	var sids []string
	c := f.client(0)
	for i := 0; i < n; i++ {
		sid := fmt.Sprintf("h%d.local.test", i)
		addSoul(f.t, c, sid, sshtest.Start(f.t, sshtest.Options{}))
		sids = append(sids, sid)
	}
	return sids
}

// TestFleetAnyKeeperAnswers: three keepers on one PostgreSQL make one
// control plane: what one keeper writes the others read, a run's event
// stream is served by a keeper that does not execute it, to the end, and
// concurrent writes from the three keep the audit chain linear.
func TestFleetAnyKeeperAnswers(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 3, "")
	sids := f.hosts(1)
	ctx := context.Background()
	if _, err := f.client(1).SoulGet(ctx, sids[0]); err != nil {
		t.Fatalf("keeper 1 does not see the soul keeper 0 registered: %v", err)
	}
	ledgerPath := filepath.Join(t.TempDir(), "ledger")
	run, _, err := f.client(2).RunCreate(ctx, client.RunCreate{Scenario: fleetScenario(ledgerPath, "2"), Input: map[string]any{"tag": "sse", "host": sids[0]}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, f.client(0), run.ID, "a step running", func(r *client.Run) bool { return stepRunning("first")(r) })
	owner, _ := f.owner(run.ID)
	if owner < 0 {
		t.Fatal("the running run has no owner among the keepers")
	}
	other := (owner + 1) % 3
	var kinds []string
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := f.client(other).RunEvents(sctx, run.ID, 0, func(e client.RunEvent) error {
		kinds = append(kinds, string(e.Kind))
		return nil
	}); err != nil {
		t.Fatalf("event stream from keeper %d (the run executes on %d): %v, got %v", other, owner, err, kinds)
	}
	joined := strings.Join(kinds, " ")
	if !strings.Contains(joined, "step.started") || !strings.HasSuffix(joined, "run.finished") || strings.Count(joined, "step.finished") != 2 {
		t.Fatalf("the stream from keeper %d lacks the events of the run executing on keeper %d: %v", other, owner, kinds)
	}
	if c := ledger(t, ledgerPath); c["sse first"] != 1 || c["sse second"] != 1 {
		t.Fatalf("ledger = %v", c)
	}

	// Concurrent audited writes through all three keepers.
	var wg sync.WaitGroup
	errs := make(chan error, 60)
	for k := 0; k < 3; k++ {
		c := f.client(k)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 20; j++ {
				name := fmt.Sprintf("p%d-%d", k, j)
				if _, err := c.ProviderCreate(ctx, client.ProviderCreate{Name: name, Driver: "local"}); err != nil {
					errs <- fmt.Errorf("keeper %d: create provider %s: %w", k, name, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	list, err := f.client(1).ProviderList(ctx, client.ListOptions{Limit: 100})
	if err != nil || len(list.Items) != 60 {
		t.Fatalf("providers seen by keeper 1: %d %v", len(list.Items), err)
	}
	for i := range f.procs {
		f.procs[i].Interrupt(t)
	}
	r := f.verifyAudit(1)
	// 1 admin token + 1 soul + run created + run finished + 60 providers.
	if r.Checked < 64 || r.HeadSeq != r.Checked {
		t.Fatalf("audit report = %+v", r)
	}
	if r.Checkpoints < 3 {
		t.Fatalf("audit checkpoints = %d, want one per keeper at least", r.Checkpoints)
	}
}

// TestFleetKill9OneKeeper: 50 runs submitted round-robin to three keepers;
// one keeper is killed with SIGKILL mid-run. Its runs are taken over by the
// others once its heartbeat row is stale, and resume with their commands
// in flight reattached: every run succeeds, every command ran exactly
// once, and the audit chain written by the three keepers is valid.
func TestFleetKill9OneKeeper(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 3, "")
	sids := f.hosts(3)
	ledgerPath := filepath.Join(t.TempDir(), "ledger")
	sc := fleetScenario(ledgerPath, "1")
	const n = 50
	ids := make([]string, n)
	tags := map[string]string{}
	for i := range ids {
		run, _, err := f.client(i%3).RunCreate(context.Background(), client.RunCreate{Scenario: sc,
			Input: map[string]any{"tag": fmt.Sprintf("r%02d", i), "host": sids[i%len(sids)]}})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = run.ID
		tags[run.ID] = fmt.Sprintf("r%02d", i)
	}
	const victim = 1
	deadline := time.Now().Add(60 * time.Second)
	for len(f.running(victim)) < 3 {
		if time.Now().After(deadline) {
			t.Fatal("keeper 1 never executed 3 runs at once")
		}
		time.Sleep(50 * time.Millisecond)
	}
	f.kill9(victim)
	killed := time.Now()
	orphans := f.running(victim)
	if len(orphans) == 0 {
		t.Fatal("the killed keeper held no run")
	}

	// Watch the orphans until another keeper holds or finished each.
	took := map[string]time.Duration{}
	for len(took) < len(orphans) && time.Since(killed) < 120*time.Second {
		for _, id := range orphans {
			if _, ok := took[id]; ok {
				continue
			}
			if o, phase := f.owner(id); o != victim || phase != "Running" {
				took[id] = time.Since(killed)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(took) < len(orphans) {
		t.Fatalf("only %d of the %d runs of the killed keeper were taken over within 120 s", len(took), len(orphans))
	}
	slowest, fastest := time.Duration(0), time.Hour
	for _, d := range took {
		slowest, fastest = max(slowest, d), min(fastest, d)
	}
	t.Logf("failover: %d runs of the killed keeper taken over %.1f-%.1f s after kill -9 (lease staleness %s)", len(orphans), fastest.Seconds(), slowest.Seconds(), runner.StaleAfter)

	final := f.waitTerminal(ids, 0, 2)
	wasOrphan := map[string]bool{}
	for _, id := range orphans {
		wasOrphan[id] = true
	}
	count := ledger(t, ledgerPath)
	succeeded := 0
	for _, id := range ids {
		r, tag := final[id], tags[id]
		if r.Phase != "Succeeded" {
			t.Errorf("run %s (%s, orphan %v) = %s %+v", id, tag, wasOrphan[id], r.Phase, r.Error)
			continue
		}
		succeeded++
		for _, step := range []string{"first", "second"} {
			if c := count[tag+" "+step]; c != 1 {
				t.Errorf("run %s (%s) succeeded but its step %s ran %d times", id, tag, step, c)
			}
		}
	}
	t.Logf("after kill -9 of one keeper: %d of %d succeeded (%d orphaned, %d commands reattached)", succeeded, len(ids), len(orphans), countReattached(t, f.client(0), orphans))

	f.start(victim)
	for _, i := range []int{0, 2, victim} {
		f.procs[i].Interrupt(t)
	}
	f.verifyAudit(0)
}

// TestFleetRollingRestart: while 50 runs are submitted round-robin to the
// keepers that are up, each of the three keepers in turn gets SIGTERM,
// drains and is restarted. No run is lost, none fails, and every command
// ran exactly once.
func TestFleetRollingRestart(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 3, "")
	sids := f.hosts(3)
	ledgerPath := filepath.Join(t.TempDir(), "ledger")
	sc := fleetScenario(ledgerPath, "1")
	const n = 50
	var mu sync.Mutex
	down := -1 // the keeper being restarted
	ids := []string{}
	submitted := make(chan struct{})
	go func() {
		defer close(submitted)
		for i, attempt := 0, 0; i < n; attempt++ {
			mu.Lock()
			k := attempt % 3
			if k == down {
				mu.Unlock()
				continue
			}
			c := f.client(k)
			mu.Unlock()
			run, _, err := c.RunCreate(context.Background(), client.RunCreate{Scenario: sc,
				Input: map[string]any{"tag": fmt.Sprintf("r%02d", i), "host": sids[i%len(sids)]}})
			if err != nil {
				// The keeper was stopping: the client tries the next one.
				continue
			}
			mu.Lock()
			ids = append(ids, run.ID)
			mu.Unlock()
			i++
			time.Sleep(150 * time.Millisecond)
		}
	}()
	for k := 0; k < 3; k++ {
		deadline := time.Now().Add(60 * time.Second)
		for len(f.running(k)) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("keeper %d executes nothing", k)
			}
			time.Sleep(50 * time.Millisecond)
		}
		mu.Lock()
		down = k
		mu.Unlock()
		f.procs[k].Terminate(t)
		p := serve(t, f.dirs[k], "--config", f.cfgs[k])
		mu.Lock()
		f.procs[k], down = p, -1
		mu.Unlock()
	}
	<-submitted
	if len(ids) != n {
		t.Fatalf("%d runs accepted, want %d", len(ids), n)
	}
	final := f.waitTerminal(ids, 0, 1, 2)
	count := ledger(t, ledgerPath)
	for i, id := range ids {
		if r := final[id]; r.Phase != "Succeeded" {
			t.Errorf("run %s = %s %+v", id, r.Phase, r.Error)
		}
		for _, step := range []string{"first", "second"} {
			if c := count[fmt.Sprintf("r%02d %s", i, step)]; c != 1 {
				t.Errorf("command r%02d %s ran %d times, want exactly once", i, step, c)
			}
		}
	}
	if len(count) != 2*n {
		t.Errorf("ledger has %d distinct lines, want %d", len(count), 2*n)
	}
	for i := range f.procs {
		f.procs[i].Interrupt(t)
	}
	f.verifyAudit(2)
}

// TestFleetRefusesAnotherDataKey: a keeper pointed at the fleet's database
// with another data key (a mistake, or a keeper that is not one of ours)
// would fail every run it claims and append audit rows under another key.
// It refuses to start, naming data_key_ref, and writes nothing: no audit
// row, no checkpoint in the shared directory, no claimed run.
func TestFleetRefusesAnotherDataKey(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1, "")
	sids := f.hosts(1)
	ctx := context.Background()
	// A run handed back by a drain: Running, its lease released, which
	// any keeper on the database may claim.
	run, _, err := f.client(0).RunCreate(ctx, client.RunCreate{Scenario: fleetScenario(filepath.Join(t.TempDir(), "ledger"), "1"), Input: map[string]any{"tag": "a", "host": sids[0]}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, f.client(0), run.ID, "step first running", stepRunning("first"))
	f.procs[0].Terminate(t)
	if _, phase := f.owner(run.ID); phase != "Running" {
		t.Fatalf("the handed-back run is %s", phase)
	}
	var headBefore int64
	if err := f.db.QueryRow(`SELECT seq FROM audit_head`).Scan(&headBefore); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	other := filepath.Join(dir, "other.key")
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(other, []byte(base64.StdEncoding.EncodeToString(raw)), 0o600); err != nil {
		t.Fatal(err)
	}
	shared, err := os.ReadFile(f.cfgs[0])
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	var cpDir string
	for _, l := range strings.Split(string(shared), "\n") {
		switch {
		case strings.HasPrefix(l, "data_key_ref:"):
			l = fmt.Sprintf("data_key_ref: %q", "file:"+other)
		case strings.HasPrefix(l, "data_dir:"):
			l = fmt.Sprintf("data_dir: %q", filepath.Join(dir, "data"))
		case strings.HasPrefix(l, "audit_checkpoint_dir:"):
			cpDir = strings.Trim(strings.TrimPrefix(l, "audit_checkpoint_dir: "), `"`)
		}
		lines = append(lines, l)
	}
	cfg := filepath.Join(dir, "keeper.yml")
	if err := os.WriteFile(cfg, []byte(strings.Join(lines, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	cpsBefore, _ := filepath.Glob(filepath.Join(cpDir, "*"))
	cmd := exec.Command(keeperBin, "serve", "--listen", "127.0.0.1:0", "--config", cfg)
	cmd.Dir = dir
	var out []byte
	done := make(chan error, 1)
	go func() {
		var err error
		out, err = cmd.CombinedOutput()
		done <- err
	}()
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill() // the process this test started, by PID
		<-done
		t.Fatalf("the keeper with another data key kept serving:\n%s", out)
	}
	if err == nil || !strings.Contains(string(out), "keeper.data_key_mismatch") || !strings.Contains(string(out), "data_key_ref file:"+other) {
		t.Fatalf("keeper with another data key: %v\n%s", err, out)
	}
	var headAfter int64
	if err := f.db.QueryRow(`SELECT seq FROM audit_head`).Scan(&headAfter); err != nil {
		t.Fatal(err)
	}
	if headAfter != headBefore {
		t.Fatalf("the refused keeper appended audit rows: head %d -> %d", headBefore, headAfter)
	}
	if cps, _ := filepath.Glob(filepath.Join(cpDir, "*")); len(cps) != len(cpsBefore) {
		t.Fatalf("the refused keeper wrote a checkpoint into the shared directory: %v -> %v", cpsBefore, cps)
	}
	// Still released (no owner): the refused keeper claimed nothing.
	if o, phase := f.owner(run.ID); o != -1 || phase != "Running" {
		t.Fatalf("after the refused keeper the run is %s, owner index %d", phase, o)
	}

	// The fleet's own keeper resumes the run; the chain is intact.
	f.start(0)
	final := waitFor(t, f.client(0), run.ID, "the run finishing", func(r *client.Run) bool { return client.Terminal(r.Phase) })
	if final.Phase != "Succeeded" {
		t.Fatalf("the fleet's run = %s %+v", final.Phase, final.Error)
	}
	f.procs[0].Interrupt(t)
	f.verifyAudit(0)
}
