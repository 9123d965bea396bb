package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/testdb"
)

// testDrift: a check's outcome is recorded only for the check run last
// started; the same state again writes no audit event, a new state one;
// an acknowledgement is audited and cleared by the next change of state;
// lists page by soul with every seed of each.
func testDrift(t *testing.T, b testdb.Backend) {
	s := b.Open(t)
	events := func() int { return len(allEvents(t, s)) }
	record := func(sid string, seed int64, run, state string) string {
		t.Helper()
		before, err := s.DriftRecord(ctx, store.DriftRecordParams{Drift: store.SoulDrift{SID: sid, SeedID: seed, RunID: run, State: state, Reason: "r " + state}, Actor: "tok_t"})
		if err != nil {
			t.Fatal(err)
		}
		return before
	}
	if err := s.DriftStart(ctx, "a.test", 1, "run_1"); err != nil {
		t.Fatal(err)
	}
	if err := s.DriftStart(ctx, "a.test", 1, "run_2"); err != nil { // a second check started before the first reported
		t.Fatal(err)
	}
	n0 := events()
	// A stale check's report, and a run no drift check started, record
	// nothing and say so: nothing may follow from them (remediation,
	// notifications).
	for _, run := range []string{"run_1", "run_never_started"} {
		if _, err := s.DriftRecord(ctx, store.DriftRecordParams{Drift: store.SoulDrift{SID: "a.test", SeedID: 1, RunID: run, State: store.DriftDrifted}, Actor: "tok_t"}); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the report of %s: %v, want ErrNotFound", run, err)
		}
	}
	ds, err := s.DriftList(ctx, store.DriftListParams{Limit: 10})
	if err != nil || len(ds) != 1 || ds[0].State != store.DriftChecking || ds[0].RunID != "run_2" || events() != n0 {
		t.Fatalf("a stale check's report changed the drift: %+v, %v (%d events, were %d)", ds, err, events(), n0)
	}
	if before := record("a.test", 1, "run_2", store.DriftDrifted); before != store.DriftChecking || events() != n0+1 {
		t.Fatalf("first report: before %q, %d events (want %d)", before, events(), n0+1)
	}
	// The same state again: the reason is refreshed, no event.
	if err := s.DriftStart(ctx, "a.test", 1, "run_3"); err != nil {
		t.Fatal(err)
	}
	if before := record("a.test", 1, "run_3", store.DriftDrifted); before != store.DriftDrifted || events() != n0+1 {
		t.Fatalf("same state: before %q, %d events (want %d)", before, events(), n0+1)
	}
	until := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	if n, err := s.DriftAck(ctx, store.DriftAckParams{SID: "a.test", Until: until, Reason: "known", Actor: "tok_t"}); err != nil || n != 1 || events() != n0+2 {
		t.Fatalf("ack: %d, %v, %d events", n, err, events())
	}
	if _, err := s.DriftAck(ctx, store.DriftAckParams{SID: "nobody.test", Until: until, Reason: "x", Actor: "tok_t"}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("ack of an unknown soul: %v", err)
	}
	ds, _ = s.DriftList(ctx, store.DriftListParams{SID: "a.test", Limit: 1})
	if len(ds) != 1 || !ds[0].Acknowledged(time.Now()) || ds[0].AckReason != "known" || ds[0].AckBy != "tok_t" {
		t.Fatalf("after the ack: %+v", ds)
	}
	// A new state clears the acknowledgement.
	if err := s.DriftStart(ctx, "a.test", 1, "run_4"); err != nil {
		t.Fatal(err)
	}
	record("a.test", 1, "run_4", store.DriftInSync)
	ds, _ = s.DriftList(ctx, store.DriftListParams{SID: "a.test", Limit: 1})
	if len(ds) != 1 || ds[0].State != store.DriftInSync || ds[0].AckUntil != nil || events() != n0+3 {
		t.Fatalf("after in sync: %+v, %d events", ds, events())
	}

	// Pages by soul, every seed of each; counts by seed state.
	for _, sd := range []struct {
		sid  string
		seed int64
	}{{"b.test", 1}, {"b.test", 2}, {"c.test", 1}} {
		if err := s.DriftStart(ctx, sd.sid, sd.seed, "run_"+sd.sid); err != nil {
			t.Fatal(err)
		}
	}
	record("b.test", 2, "run_b.test", store.DriftUnknown)
	page, err := s.DriftList(ctx, store.DriftListParams{After: "a.test", Limit: 1})
	if err != nil || len(page) != 2 || page[0].SID != "b.test" || page[1].SeedID != 2 {
		t.Fatalf("page after a.test: %+v, %v", page, err)
	}
	page, _ = s.DriftList(ctx, store.DriftListParams{State: store.DriftUnknown, Limit: 10})
	if len(page) != 2 || page[0].SID != "b.test" {
		t.Fatalf("souls with an unknown seed: %+v", page)
	}
	counts, err := s.DriftCounts(ctx)
	if err != nil || counts[store.DriftInSync] != 1 || counts[store.DriftChecking] != 2 || counts[store.DriftUnknown] != 1 {
		t.Fatalf("counts = %v, %v", counts, err)
	}
}
