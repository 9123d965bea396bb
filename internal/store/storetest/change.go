package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/secret"
	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/store/sqlstore"
	"github.com/soulstack/soulstack/internal/testdb"
)

// changeLog subscribes to a store's changes of a soul's identity
// (SoulGone, CertRenewed); each is recorded with what the store itself
// answered about the soul at delivery (committed or not). others records
// every other kind of change.
type changeLog struct {
	mu      sync.Mutex
	changes []store.Change
	seen    []string // soul status at delivery, "gone" when deleted
	others  []store.Change
}

func (l *changeLog) subscribe(c *store.Changes, s func() store.Store) {
	c.Subscribe(func(ctx context.Context, ch store.Change) {
		sid := ""
		switch ch := ch.(type) {
		case store.SoulGone:
			sid = ch.Soul.SID
		case store.CertRenewed:
			sid = ch.SID
		default:
			l.mu.Lock()
			defer l.mu.Unlock()
			l.others = append(l.others, ch)
			return
		}
		state := "gone"
		if so, err := s().SoulGet(ctx, sid); err == nil {
			state = so.Status + "/" + so.CertSerial
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		l.changes = append(l.changes, ch)
		l.seen = append(l.seen, state)
	})
}

// takeOthers returns the other changes published since it was last
// called, as text.
func (l *changeLog) takeOthers() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := fmt.Sprintf("%+v", l.others)
	l.others = nil
	return out
}

func (l *changeLog) take() ([]store.Change, []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, s := l.changes, l.seen
	l.changes, l.seen = nil, nil
	return c, s
}

// testChanges: deleting a soul, destroying souls and renewing a
// certificate publish store.SoulGone and store.CertRenewed after the
// commit (a subscriber reading the store sees the change made), with the
// soul as it was; a destroy publishes only the souls it destroyed; a
// refused mutation publishes nothing. A provision, a join, a destroy, a
// run's end and a change of drift publish their own kinds (store.On
// subscribes to one).
func testChanges(t *testing.T, b testdb.Backend) {
	changes := &store.Changes{}
	var s *sqlstore.Store
	log := &changeLog{}
	log.subscribe(changes, func() store.Store { return s })
	s = b.Open(t, sqlstore.WithChanges(changes))
	provisionJoin(t, s)
	if _, err := s.SoulJoin(ctx, joinParams("vm-1.local.test", "hash-a")); err != nil {
		t.Fatal(err)
	}
	if got, _ := log.take(); len(got) != 0 {
		t.Fatalf("provision and join published %+v", got)
	}
	if got, want := log.takeOthers(), "[{Provider:local Project:default SIDs:[vm-1.local.test vm-2.local.test]} {SID:vm-1.local.test}]"; got != want {
		t.Fatalf("provision and join published %s, want %s", got, want)
	}

	if _, err := s.SoulRenewCert(ctx, store.SoulRenewParams{SID: "vm-1.local.test", OldSerial: "abc123", CertSerial: "def456", CertNotAfter: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	got, seen := log.take()
	if len(got) != 1 || got[0] != (store.CertRenewed{SID: "vm-1.local.test", OldSerial: "abc123", Serial: "def456"}) || seen[0] != "active/def456" {
		t.Fatalf("renew published %+v (store said %v)", got, seen)
	}
	// A refused renewal (the old serial again) publishes nothing.
	if _, err := s.SoulRenewCert(ctx, store.SoulRenewParams{SID: "vm-1.local.test", OldSerial: "abc123", CertSerial: "x", CertNotAfter: time.Now()}); err == nil {
		t.Fatal("renewed with a superseded serial")
	}
	if got, _ := log.take(); len(got) != 0 {
		t.Fatalf("a refused renewal published %+v", got)
	}

	// The destroy names both souls, but vm-2 is not one of this
	// provider's VMs in vm_ids: only vm-1 is destroyed and published.
	if _, err := s.CloudDestroy(ctx, store.CloudDestroyParams{Provider: "local", VMIDs: []string{"vm-1"}, SIDs: []string{"vm-1.local.test", "vm-2.local.test"}, Destroyed: []string{"vm-1"}, Actor: "tok_creator"}); err != nil {
		t.Fatal(err)
	}
	got, seen = log.take()
	if len(got) != 1 || seen[0] != "destroyed/" {
		t.Fatalf("destroy published %+v (store said %v), want vm-1's SoulGone", got, seen)
	}
	if g, ok := got[0].(store.SoulGone); !ok || !g.Destroyed || g.Soul.SID != "vm-1.local.test" || g.Soul.CertSerial != "def456" || g.Soul.Status != store.SoulActive {
		t.Fatalf("destroy published %+v, want vm-1 as it was (active, serial def456)", got[0])
	}
	if got, want := log.takeOthers(), "[{Provider:local Project:default Destroyed:[vm-1] AlreadyGone:[]}]"; got != want {
		t.Fatalf("destroy published %s, want %s", got, want)
	}
	// Destroying it again changes no soul and publishes nothing.
	if _, err := s.CloudDestroy(ctx, store.CloudDestroyParams{Provider: "local", VMIDs: []string{"vm-1"}, SIDs: []string{"vm-1.local.test"}, AlreadyGone: []string{"vm-1"}, Actor: "tok_creator"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := log.take(); len(got) != 0 {
		t.Fatalf("a second destroy published %+v", got)
	}
	if got, want := log.takeOthers(), "[{Provider:local Project:default Destroyed:[] AlreadyGone:[vm-1]}]"; got != want {
		t.Fatalf("a second destroy published %s, want %s", got, want)
	}

	if err := s.SoulDelete(ctx, store.DeleteParams{Key: "vm-2.local.test", Actor: "tok_t"}); err != nil {
		t.Fatal(err)
	}
	got, seen = log.take()
	if len(got) != 1 || seen[0] != "gone" {
		t.Fatalf("delete published %+v (store said %v)", got, seen)
	}
	if g, ok := got[0].(store.SoulGone); !ok || g.Destroyed || g.Soul.SID != "vm-2.local.test" || g.Soul.VMID != "vm-2" {
		t.Fatalf("delete published %+v, want vm-2 as it was", got[0])
	}
	if err := s.SoulDelete(ctx, store.DeleteParams{Key: "vm-2.local.test", Actor: "tok_t"}); err == nil {
		t.Fatal("deleted a soul twice")
	}
	if got, _ := log.take(); len(got) != 0 {
		t.Fatalf("a refused delete published %+v", got)
	}

}

// testSealed: with a sealer, the secret-looking fields of provider configs
// and seed inputs are sealed in the database and opened on every read; the
// other fields stay readable.
func testSealed(t *testing.T, b testdb.Backend) {
	sealer, err := secret.NewSealer(bytes.Repeat([]byte{9}, 32))
	if err != nil {
		t.Fatal(err)
	}
	s := b.Open(t, sqlstore.WithSealer(sealer))
	const pw = "hunter2-provider-secret"
	p, err := s.ProviderCreate(ctx, store.ProviderCreateParams{Provider: store.Provider{Name: "os", Driver: "openstack",
		Config: json.RawMessage(`{"auth_url":"https://keystone.example","password":"` + pw + `"}`)}, Actor: "tok_t"})
	if err != nil {
		t.Fatal(err)
	}
	wantConfig := func(what string, cfg json.RawMessage) {
		t.Helper()
		var m map[string]string
		if err := json.Unmarshal(cfg, &m); err != nil || m["password"] != pw || m["auth_url"] != "https://keystone.example" {
			t.Fatalf("%s: config %s, %v", what, cfg, err)
		}
	}
	wantConfig("create", p.Config)
	got, err := s.ProviderGet(ctx, "os")
	if err != nil {
		t.Fatal(err)
	}
	wantConfig("get", got.Config)
	list, err := s.ProviderList(ctx, store.ListParams{})
	if err != nil || len(list) != 1 {
		t.Fatalf("list = %+v, %v", list, err)
	}
	wantConfig("list", list[0].Config)

	provisionJoin(t, s)
	const seedPW = "seed-input-secret-value"
	// pin is secret by the scenario's declaration, not by its name.
	const seedPin = "seed-declared-pin-value"
	sd, err := s.SeedAdd(ctx, store.SeedAddParams{Seed: store.SoulSeed{SID: "vm-2.local.test", Scenario: "steps: []\n",
		Input: json.RawMessage(`{"pkg":"curl","password":"` + seedPW + `","pin":"` + seedPin + `"}`), Secret: []string{"pin"}, CreatedBy: "tok_t"}, Actor: "tok_t"})
	if err != nil || !strings.Contains(string(sd.Input), seedPW) || !strings.Contains(string(sd.Input), seedPin) || !slices.Equal(sd.Secret, []string{"pin"}) {
		t.Fatalf("seed add = %s %v, %v", sd.Input, sd.Secret, err)
	}
	seeds, err := s.Seeds(ctx, "vm-2.local.test")
	if err != nil || len(seeds) != 1 || !strings.Contains(string(seeds[0].Input), seedPW) || !strings.Contains(string(seeds[0].Input), seedPin) ||
		!strings.Contains(string(seeds[0].Input), "curl") || !slices.Equal(seeds[0].Secret, []string{"pin"}) {
		t.Fatalf("seeds = %+v, %v", seeds, err)
	}

	var configs, inputs []string
	for q, out := range map[string]*[]string{`SELECT config FROM providers`: &configs, `SELECT input FROM soul_seeds`: &inputs} {
		rows, err := s.DB().Query(q)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var v string
			if err := rows.Scan(&v); err != nil {
				t.Fatal(err)
			}
			*out = append(*out, v)
		}
		rows.Close()
	}
	for _, v := range append(configs, inputs...) {
		if strings.Contains(v, pw) || strings.Contains(v, seedPW) || strings.Contains(v, seedPin) {
			t.Fatalf("the database holds a secret in clear: %s", v)
		}
	}
	if len(configs) != 2 || !strings.Contains(strings.Join(configs, " "), "keystone.example") || !strings.Contains(strings.Join(configs, " "), "sealed:") ||
		len(inputs) != 2 || !strings.Contains(inputs[1], "curl") || !strings.Contains(inputs[1], "sealed:") {
		t.Fatalf("stored configs %v, inputs %v: the fields that are not secret should stay readable", configs, inputs)
	}
}

// testChangesOfRunsAndDrift: store.On subscribes to one kind of change; a
// run's end publishes store.RunFinished, a change of a seed's drift state
// store.DriftChanged; a refused join, a refused finish and the same drift
// state again publish nothing.
func testChangesOfRunsAndDrift(t *testing.T, b testdb.Backend) {
	changes := &store.Changes{}
	log := &changeLog{}
	log.subscribe(changes, func() store.Store { return nil })
	var joined []string
	store.On(changes, func(_ context.Context, j store.SoulJoined) { joined = append(joined, j.SID) })
	s := b.Open(t, sqlstore.WithChanges(changes))
	provisionJoin(t, s)
	if _, err := s.SoulJoin(ctx, joinParams("vm-1.local.test", "hash-a")); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(joined, []string{"vm-1.local.test"}) {
		t.Fatalf("store.On[SoulJoined] saw %v", joined)
	}
	log.takeOthers()
	if _, err := s.SoulJoin(ctx, joinParams("vm-1.local.test", "hash-a")); err == nil {
		t.Fatal("joined twice with one token")
	}
	if got := log.takeOthers(); got != "[]" || len(joined) != 1 {
		t.Fatalf("a refused join published %s (joined %v)", got, joined)
	}

	// A run's creation and its end (timed: it never started); a lease
	// lost refuses the end and publishes nothing.
	if _, _, err := s.RunCreate(ctx, store.RunCreateParams{Run: newRun("run_c", "", "d"), Actor: "tok_a"}); err != nil {
		t.Fatal(err)
	}
	if got, want := log.takeOthers(), "[{ID:run_c Project:default Mode:apply}]"; got != want {
		t.Fatalf("a run's creation published %s, want %s", got, want)
	}
	if err := s.RunFinish(ctx, store.RunFinishParams{ID: "run_c", Owner: "keeper-x", Phase: store.PhaseSucceeded}); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("finish by a keeper that does not own the run: %v", err)
	}
	if got := log.takeOthers(); got != "[]" {
		t.Fatalf("a refused end published %s", got)
	}
	if err := s.RunFinish(ctx, store.RunFinishParams{ID: "run_c", Phase: store.PhaseFailed, ErrorCode: "step.failed", ErrorMsg: "x"}); err != nil {
		t.Fatal(err)
	}
	if got := log.takeOthers(); !strings.HasPrefix(got, "[{ID:run_c Project:default Mode:apply Phase:Failed ErrorCode:step.failed CreatedAt:") ||
		!strings.Contains(got, " StartedAt:0001-01-01 00:00:00 +0000 UTC FinishedAt:") {
		t.Fatalf("a run's end published %s", got)
	}

	// A change of drift state publishes; the same state again does not.
	for i, want := range []string{"[{SID:vm-1.local.test SeedID:1 From:checking To:drifted}]", "[]"} {
		run := fmt.Sprintf("run_d%d", i)
		if err := s.DriftStart(ctx, "vm-1.local.test", 1, run); err != nil {
			t.Fatal(err)
		}
		if _, err := s.DriftRecord(ctx, store.DriftRecordParams{Drift: store.SoulDrift{SID: "vm-1.local.test", SeedID: 1, RunID: run, State: store.DriftDrifted}, Actor: "tok_t"}); err != nil {
			t.Fatal(err)
		}
		if got := log.takeOthers(); got != want {
			t.Fatalf("drift record %d published %s, want %s", i, got, want)
		}
	}
}
