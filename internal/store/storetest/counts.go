package storetest

import (
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/testdb"
)

// testCounts: Counts says how many runs are Pending and Running now and
// how many souls each project holds in each status; finished runs are
// not counted.
func testCounts(t *testing.T, b testdb.Backend) {
	s := b.Open(t)
	if _, err := s.ProjectCreate(ctx, store.ProjectCreateParams{Project: store.Project{Name: "team-a"}, Actor: "tok_admin"}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"run_1", "run_2", "run_3", "run_4"} {
		if _, _, err := s.RunCreate(ctx, store.RunCreateParams{Run: newRun(id, "", "d"), Actor: "tok_a"}); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"run_2", "run_3"} {
		if _, ok, err := s.RunClaim(ctx, id, "keeper-a", time.Now().Add(-time.Minute)); err != nil || !ok {
			t.Fatalf("claim %s: %v %v", id, ok, err)
		}
	}
	if err := s.RunFinish(ctx, store.RunFinishParams{ID: "run_3", Owner: "keeper-a", Phase: store.PhaseSucceeded}); err != nil {
		t.Fatal(err)
	}
	for _, so := range []store.Soul{
		{SID: "a.local.test", Address: "10.0.0.1"},
		{SID: "b.local.test", Address: "10.0.0.2"},
		{SID: "c.local.test", Address: "10.0.0.3", Status: store.SoulPending},
		{SID: "d.local.test", Address: "10.0.0.4", Project: "team-a"},
	} {
		if _, err := s.SoulCreate(ctx, store.SoulCreateParams{Soul: so, Actor: "tok_admin"}); err != nil {
			t.Fatal(err)
		}
	}
	c, err := s.Counts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Runs) != 2 || c.Runs[store.PhasePending] != 2 || c.Runs[store.PhaseRunning] != 1 {
		t.Errorf("runs = %v, want 2 Pending and 1 Running", c.Runs)
	}
	want := map[store.SoulCountKey]int{
		{Project: "default", Status: store.SoulActive}:  2,
		{Project: "default", Status: store.SoulPending}: 1,
		{Project: "team-a", Status: store.SoulActive}:   1,
	}
	if len(c.Souls) != len(want) {
		t.Errorf("souls = %v, want %v", c.Souls, want)
	}
	for k, n := range want {
		if c.Souls[k] != n {
			t.Errorf("souls %v = %d, want %d (all: %v)", k, c.Souls[k], n, c.Souls)
		}
	}
}
