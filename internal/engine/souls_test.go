package engine_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/engine"
	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/store/sqlstore"
	"github.com/soulstack/soulstack/internal/testdb"
)

// clock is a store clock the test moves.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) tick()          { c.mu.Lock(); c.t = c.t.Add(time.Minute); c.mu.Unlock() }

// TestSoulsRecord: Record moves a run's souls through their statuses in
// the registry and in the run's own records (what soul.status reads), and
// writes an active soul's last contact once per run.
func TestSoulsRecord(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := &clock{t: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	st := testdb.SQLite.Open(t, sqlstore.WithClock(clk.now))
	for _, sid := range []string{"vm-1.local.test", "vm-2.local.test"} {
		if _, err := st.SoulCreate(ctx, store.SoulCreateParams{Soul: store.Soul{SID: sid, Address: "10.0.0.1", Status: store.SoulPending}, Actor: "tok_admin"}); err != nil {
			t.Fatal(err)
		}
	}
	status := func(s *engine.Souls, sid string) store.Soul {
		t.Helper()
		so, err := s.Lookup(ctx, sid)
		if err != nil {
			t.Fatal(err)
		}
		return so
	}
	stored := func(sid string) store.Soul {
		t.Helper()
		so, err := st.SoulGet(ctx, sid)
		if err != nil {
			t.Fatal(err)
		}
		return so
	}

	run1 := engine.NewSouls(engine.SoulsConfig{Store: st})
	if so := status(run1, "vm-1.local.test"); so.Status != store.SoulPending {
		t.Fatalf("before contact: %s", so.Status)
	}
	clk.tick()
	if err := run1.Record(ctx, "run_1", "tok_a", []engine.Contact{{SID: "vm-1.local.test", Reached: true}}); err != nil {
		t.Fatal(err)
	}
	if so := status(run1, "vm-1.local.test"); so.Status != store.SoulActive || so.LastSeenAt == nil || !so.LastSeenAt.Equal(clk.now()) {
		t.Fatalf("the run's record after first contact = %+v", so)
	}
	first := clk.now()
	if so := stored("vm-1.local.test"); so.Status != store.SoulActive || !so.LastSeenAt.Equal(first) {
		t.Fatalf("registry after first contact = %+v", so)
	}

	// Later steps of the same run write nothing.
	clk.tick()
	if err := run1.Record(ctx, "run_1", "tok_a", []engine.Contact{{SID: "vm-1.local.test", Reached: true}}); err != nil {
		t.Fatal(err)
	}
	if so := stored("vm-1.local.test"); !so.LastSeenAt.Equal(first) {
		t.Fatalf("a second step of the run wrote last_seen_at again: %v, want %v", so.LastSeenAt, first)
	}

	// The next run writes it once more.
	run2 := engine.NewSouls(engine.SoulsConfig{Store: st})
	status(run2, "vm-1.local.test")
	if err := run2.Record(ctx, "run_2", "tok_a", []engine.Contact{{SID: "vm-1.local.test", Reached: true}}); err != nil {
		t.Fatal(err)
	}
	if so := stored("vm-1.local.test"); !so.LastSeenAt.Equal(clk.now()) {
		t.Fatalf("the next run's contact: last_seen_at %v, want %v", so.LastSeenAt, clk.now())
	}

	// A record another run made stale: run2 knew vm-2 pending, run1
	// activates it, run2 reaches it: run2's record follows the registry.
	if so := status(run2, "vm-2.local.test"); so.Status != store.SoulPending {
		t.Fatalf("vm-2 = %s", so.Status)
	}
	if err := run1.Record(ctx, "run_1", "tok_a", []engine.Contact{{SID: "vm-2.local.test", Reached: true}}); err != nil {
		t.Fatal(err)
	}
	if err := run2.Record(ctx, "run_2", "tok_a", []engine.Contact{{SID: "vm-2.local.test", Reached: true}}); err != nil {
		t.Fatal(err)
	}
	if so := status(run2, "vm-2.local.test"); so.Status != store.SoulActive {
		t.Fatalf("run2's record of vm-2 after another run activated it = %s", so.Status)
	}

	// Unreachable: in the registry and in the run's record.
	clk.tick()
	if err := run2.Record(ctx, "run_2", "tok_a", []engine.Contact{{SID: "vm-1.local.test", Unreachable: true, Code: "ssh.unreachable", Error: "no route"}}); err != nil {
		t.Fatal(err)
	}
	if so := status(run2, "vm-1.local.test"); so.Status != store.SoulUnreachable || so.LastError != "no route" {
		t.Fatalf("the run's record after unreachable = %+v", so)
	}
	if so := stored("vm-1.local.test"); so.Status != store.SoulUnreachable || so.LastError != "no route" {
		t.Fatalf("registry after unreachable = %+v", so)
	}
	events, err := st.AuditList(ctx, store.AuditListParams{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, e := range events {
		if e.Action == "soul.activated" || e.Action == "soul.unreachable" {
			actions = append(actions, e.Action+" "+e.Object)
		}
	}
	want := []string{"soul.activated soul/vm-1.local.test", "soul.activated soul/vm-2.local.test", "soul.unreachable soul/vm-1.local.test"}
	if len(actions) != len(want) {
		t.Fatalf("audit = %v, want %v", actions, want)
	}
	for i := range want {
		if actions[i] != want[i] {
			t.Fatalf("audit = %v, want %v", actions, want)
		}
	}
}
