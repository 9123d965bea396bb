package api

import (
	"testing"
	"time"
)

func TestKeyConflictBudget(t *testing.T) {
	t.Parallel()
	k := newKeyConflicts()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for i := range KeyConflictBurst {
		if refusal, _ := k.check("tok_a", now); refusal != nil {
			t.Fatalf("conflict %d of the burst refused: %v", i+1, refusal)
		}
		k.spend("tok_a", now)
	}
	refusal, first := k.check("tok_a", now)
	if refusal == nil || !first || refusal.RetryAfter != KeyConflictEvery+time.Second {
		t.Fatalf("after the burst: %+v first=%v; want a first refusal with Retry-After %s", refusal, first, KeyConflictEvery+time.Second)
	}
	if refusal, first := k.check("tok_a", now.Add(KeyConflictEvery/2)); refusal == nil || first || refusal.RetryAfter != KeyConflictEvery/2+time.Second {
		t.Fatalf("later in the burst: %+v first=%v", refusal, first)
	}
	if refusal, _ := k.check("tok_b", now); refusal != nil {
		t.Fatalf("another token refused: %v", refusal)
	}
	// One conflict comes back every KeyConflictEvery.
	later := now.Add(KeyConflictEvery)
	if refusal, _ := k.check("tok_a", later); refusal != nil {
		t.Fatalf("after KeyConflictEvery: %v", refusal)
	}
	k.spend("tok_a", later)
	if refusal, first := k.check("tok_a", later); refusal == nil || !first {
		t.Fatalf("a new burst: %+v first=%v; want a first refusal again", refusal, first)
	}
}
