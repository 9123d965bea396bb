package storetest

import (
	"strings"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/testdb"
)

// testRunListFilters: RunList keeps the runs of one phase, those whose
// name contains a text, literally and ignoring ASCII case, and those
// created since a time, newest first and paged like the unfiltered list.
func testRunListFilters(t *testing.T, b testdb.Backend) {
	s := b.Open(t)
	names := map[string]string{
		"run_1": "Deploy-Web", "run_2": "deploy-db", "run_3": "backup", "run_4": "100%_done", "run_5": "100 done",
	}
	var since time.Time // run_4's creation
	for _, id := range []string{"run_1", "run_2", "run_3", "run_4", "run_5"} {
		r := newRun(id, "", "d")
		r.Name = names[id]
		if id == "run_4" {
			time.Sleep(2 * time.Millisecond) // run_3 is older by more than the stamps' microsecond
		}
		made, _, err := s.RunCreate(ctx, store.RunCreateParams{Run: r, Actor: "tok_a"})
		if err != nil {
			t.Fatal(err)
		}
		if id == "run_4" {
			since = made.CreatedAt
		}
	}
	if _, ok, err := s.RunClaim(ctx, "run_2", "keeper-a", time.Now().Add(-time.Minute)); err != nil || !ok {
		t.Fatalf("claim: %v %v", ok, err)
	}
	if err := s.RunFinish(ctx, store.RunFinishParams{ID: "run_2", Owner: "keeper-a", Phase: store.PhaseFailed, ErrorCode: "x", ErrorMsg: "x"}); err != nil {
		t.Fatal(err)
	}
	ids := func(p store.RunListParams) string {
		t.Helper()
		rs, err := s.RunList(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range rs {
			out = append(out, r.ID)
		}
		return strings.Join(out, ",")
	}
	page := store.ListParams{Limit: 10}
	tests := []struct {
		name string
		p    store.RunListParams
		want string
	}{
		{"no filter", store.RunListParams{ListParams: page}, "run_5,run_4,run_3,run_2,run_1"},
		{"phase", store.RunListParams{ListParams: page, Phase: store.PhaseFailed}, "run_2"},
		{"phase pending", store.RunListParams{ListParams: page, Phase: store.PhasePending}, "run_5,run_4,run_3,run_1"},
		{"name ignores case", store.RunListParams{ListParams: page, NameContains: "DEPLOY"}, "run_2,run_1"},
		{"name and phase", store.RunListParams{ListParams: page, NameContains: "deploy", Phase: store.PhasePending}, "run_1"},
		{"percent is literal", store.RunListParams{ListParams: page, NameContains: "0%"}, "run_4"},
		{"underscore is literal", store.RunListParams{ListParams: page, NameContains: "%_d"}, "run_4"},
		{"quote", store.RunListParams{ListParams: page, NameContains: "'"}, ""},
		{"paged", store.RunListParams{ListParams: store.ListParams{Limit: 1, After: "run_2"}, NameContains: "deploy"}, "run_1"},
		{"since, inclusive", store.RunListParams{ListParams: page, CreatedSince: since}, "run_5,run_4"},
		{"since, in another zone", store.RunListParams{ListParams: page, CreatedSince: since.In(time.FixedZone("X", 3*3600))}, "run_5,run_4"},
		{"since and name", store.RunListParams{ListParams: page, CreatedSince: since, NameContains: "done"}, "run_5,run_4"},
		{"since, nothing newer", store.RunListParams{ListParams: page, CreatedSince: since.Add(time.Hour)}, ""},
	}
	for _, tc := range tests {
		if got := ids(tc.p); got != tc.want {
			t.Errorf("%s: RunList = %q, want %q", tc.name, got, tc.want)
		}
	}
}
