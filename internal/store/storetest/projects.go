package storetest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/testdb"
)

// auditActions lists the actions of the store's audit events of project,
// oldest first.
func auditActions(t *testing.T, s store.Store, project string) []string {
	t.Helper()
	events, err := s.AuditList(ctx, store.AuditListParams{Limit: 500, Project: project})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range events {
		out = append(out, e.Action)
	}
	return out
}

// testBindings: a binding needs its project, a second one of the same
// group replaces its role, bindings list by project, kind and subject,
// one is deleted once; each change is audited in its project (the
// project's creation is the keeper's, not in it).
func testBindings(t *testing.T, b testdb.Backend) {
	s := b.Open(t)
	if _, err := s.BindingPut(ctx, store.Binding{Project: "nosuch", Kind: store.BindGroup, Subject: "devs", Role: "viewer"}, "tok_admin"); !errors.Is(err, store.ErrReferenceMissing) {
		t.Fatalf("a binding in no project: %v, want ErrReferenceMissing", err)
	}
	for _, p := range []string{"team-a", "team-b"} {
		if _, err := s.ProjectCreate(ctx, store.ProjectCreateParams{Project: store.Project{Name: p}, Actor: "tok_admin"}); err != nil {
			t.Fatal(err)
		}
	}
	put := func(project, kind, subject, role string) {
		t.Helper()
		got, err := s.BindingPut(ctx, store.Binding{Project: project, Kind: kind, Subject: subject, Role: role}, "tok_admin")
		if err != nil || got.Role != role || got.CreatedBy != "tok_admin" || got.CreatedAt.IsZero() {
			t.Fatalf("bind %s %s in %s: %+v, %v", kind, subject, project, got, err)
		}
	}
	put("team-a", store.BindGroup, "devs", "viewer")
	put("team-a", store.BindGroup, "devs", "operator")
	put("team-a", store.BindPerson, "https://idp.example u-1", "admin")
	put("team-a", store.BindGroup, "auditors", "viewer")
	put("team-b", store.BindGroup, "devs", "admin")
	list, err := s.Bindings(ctx, "team-a")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, x := range list {
		got = append(got, x.Kind+" "+x.Subject+"="+x.Role)
	}
	if want := []string{"group auditors=viewer", "group devs=operator", "person https://idp.example u-1=admin"}; !slices.Equal(got, want) {
		t.Fatalf("team-a's bindings = %q, want %q", got, want)
	}
	if all, err := s.Bindings(ctx, ""); err != nil || len(all) != 4 || all[3].Project != "team-b" {
		t.Fatalf("every project's bindings: %+v, %v", all, err)
	}
	del := store.Binding{Project: "team-a", Kind: store.BindGroup, Subject: "devs"}
	if err := s.BindingDelete(ctx, del, "tok_admin"); err != nil {
		t.Fatal(err)
	}
	if err := s.BindingDelete(ctx, del, "tok_admin"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("delete twice: %v, want ErrNotFound", err)
	}
	if l, _ := s.Bindings(ctx, "team-b"); len(l) != 1 || l[0].Role != "admin" {
		t.Fatalf("team-b's binding of the same group after team-a's went: %+v", l)
	}
	if got, want := auditActions(t, s, "team-a"), []string{"binding.put", "binding.put", "binding.put", "binding.put", "binding.deleted"}; !slices.Equal(got, want) {
		t.Fatalf("team-a's audit = %v, want %v", got, want)
	}
}

// testShares: a provider is shared with a named project, which then lists
// it; sharing it again changes nothing, sharing it with its own or an
// unknown project is refused, taking it back ends it; audited in the
// owner's project.
func testShares(t *testing.T, b testdb.Backend) {
	s := b.Open(t)
	if _, err := s.ProjectCreate(ctx, store.ProjectCreateParams{Project: store.Project{Name: "team-a"}, Actor: "tok_admin"}); err != nil {
		t.Fatal(err)
	}
	mustProvider(t, s, "shared")
	mustProvider(t, s, "private")
	sh := store.Share{Kind: "provider", Name: "shared", Project: "team-a"}
	for range 2 {
		if err := s.ShareAdd(ctx, sh, "tok_admin"); err != nil {
			t.Fatal(err)
		}
	}
	if p, err := s.ProviderGet(ctx, "shared"); err != nil || !slices.Equal(p.SharedWith, []string{"team-a"}) || p.Project != store.DefaultProject {
		t.Fatalf("the shared provider: %+v, %v", p, err)
	}
	names := func() []string {
		l, err := s.ProviderList(ctx, store.ListParams{Limit: 10, Project: "team-a"})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, p := range l {
			out = append(out, p.Name)
		}
		return out
	}
	if got := names(); !slices.Equal(got, []string{"shared"}) {
		t.Fatalf("team-a lists %v, want the shared provider alone", got)
	}
	if err := s.ShareAdd(ctx, store.Share{Kind: "provider", Name: "shared", Project: store.DefaultProject}, "tok_admin"); !errors.Is(err, store.ErrExists) {
		t.Fatalf("share with its own project: %v, want ErrExists", err)
	}
	if err := s.ShareAdd(ctx, store.Share{Kind: "provider", Name: "shared", Project: "nosuch"}, "tok_admin"); !errors.Is(err, store.ErrReferenceMissing) {
		t.Fatalf("share with no project: %v, want ErrReferenceMissing", err)
	}
	if err := s.ShareAdd(ctx, store.Share{Kind: "provider", Name: "nosuch", Project: "team-a"}, "tok_admin"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("share no provider: %v, want ErrNotFound", err)
	}
	if err := s.ShareRemove(ctx, sh, "tok_admin"); err != nil {
		t.Fatal(err)
	}
	if err := s.ShareRemove(ctx, sh, "tok_admin"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("take back twice: %v, want ErrNotFound", err)
	}
	if got := names(); len(got) != 0 {
		t.Fatalf("team-a lists %v after the share was taken back", got)
	}
	var shares []string
	for _, a := range auditActions(t, s, store.DefaultProject) {
		if a == "share.added" || a == "share.removed" {
			shares = append(shares, a)
		}
	}
	if want := []string{"share.added", "share.added", "share.removed"}; !slices.Equal(shares, want) {
		t.Fatalf("the owner's audit: %v, want %v", shares, want)
	}
	if got := auditActions(t, s, "team-a"); slices.Contains(got, "share.added") {
		t.Fatalf("team-a's audit holds the owner's share events: %v", got)
	}
}

// testRunQuota: eight runs created at once in a project allowed three
// unfinished runs: three are stored, five refused with a QuotaError
// naming runs, nothing of them stored or enqueued; another project is
// not limited by it.
func testRunQuota(t *testing.T, b testdb.Backend) {
	s := b.Open(t)
	if _, err := s.ProjectCreate(ctx, store.ProjectCreateParams{Project: store.Project{Name: "team-q", Quota: store.Quota{Runs: 3}}, Actor: "tok_admin"}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	enqueued := 0
	enqueue := func(context.Context, *sql.Tx) error { mu.Lock(); enqueued++; mu.Unlock(); return nil }
	var wg sync.WaitGroup
	var created, refused int
	for i := range 8 {
		wg.Go(func() {
			r := newRun(fmt.Sprintf("run_q%d", i), fmt.Sprintf("kq%d", i), "d")
			r.Project = "team-q"
			for {
				_, _, err := s.RunCreate(ctx, store.RunCreateParams{Run: r, Actor: "tok_a", Enqueue: enqueue})
				if errors.Is(err, store.ErrUnavailable) {
					continue // SQLite's busy writer: the keeper retries too
				}
				var qe *store.QuotaError
				mu.Lock()
				switch {
				case err == nil:
					created++
				case errors.As(err, &qe) && qe.Resource == "runs" && qe.Limit == 3 && qe.Used == 3:
					refused++
				default:
					t.Errorf("run %d: %v", i, err)
				}
				mu.Unlock()
				return
			}
		})
	}
	wg.Wait()
	if created != 3 || refused != 5 || enqueued != 3 {
		t.Fatalf("8 runs at once under a quota of 3: %d created, %d refused, %d enqueued", created, refused, enqueued)
	}
	runs, err := s.RunList(ctx, store.RunListParams{ListParams: store.ListParams{Limit: 20, Project: "team-q"}})
	if err != nil || len(runs) != 3 {
		t.Fatalf("team-q's runs: %d, %v; want 3", len(runs), err)
	}
	r := newRun("run_d", "kd", "d")
	if _, _, err := s.RunCreate(ctx, store.RunCreateParams{Run: r, Actor: "tok_a", Enqueue: enqueue}); err != nil {
		t.Fatalf("a run of the default project: %v", err)
	}
}
