package storetest

import (
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/testdb"
)

// testProjects: the default project exists and cannot be deleted; a
// project is created once, listed by name, deleted once, each audited.
func testProjects(t *testing.T, b testdb.Backend) {
	s := b.Open(t)
	if p, err := s.ProjectGet(ctx, store.DefaultProject); err != nil || p.Name != store.DefaultProject {
		t.Fatalf("the default project: %+v, %v", p, err)
	}
	p, err := s.ProjectCreate(ctx, store.ProjectCreateParams{Project: store.Project{Name: "team-a", Description: "A's"}, Actor: "tok_admin"})
	if err != nil || p.Name != "team-a" || p.Description != "A's" || p.CreatedBy != "tok_admin" || p.CreatedAt.IsZero() {
		t.Fatalf("create: %+v, %v", p, err)
	}
	if _, err := s.ProjectCreate(ctx, store.ProjectCreateParams{Project: store.Project{Name: "team-a"}, Actor: "tok_admin"}); !errors.Is(err, store.ErrExists) {
		t.Fatalf("a second team-a: %v, want ErrExists", err)
	}
	list, err := s.ProjectList(ctx, store.ListParams{Limit: 10})
	if err != nil || len(list) != 2 || list[0].Name != "default" || list[1].Name != "team-a" {
		t.Fatalf("list: %+v, %v", list, err)
	}
	if err := s.ProjectDelete(ctx, store.DeleteParams{Key: store.DefaultProject, Actor: "tok_admin"}); !errors.Is(err, store.ErrInUse) {
		t.Fatalf("delete the default project: %v, want ErrInUse", err)
	}
	if err := s.ProjectDelete(ctx, store.DeleteParams{Key: "team-a", Actor: "tok_admin"}); err != nil {
		t.Fatal(err)
	}
	if err := s.ProjectDelete(ctx, store.DeleteParams{Key: "team-a", Actor: "tok_admin"}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("delete twice: %v, want ErrNotFound", err)
	}
	if _, err := s.ProjectCreate(ctx, store.ProjectCreateParams{Project: store.Project{Name: "team-a"}, Actor: "tok_admin"}); !errors.Is(err, store.ErrRetired) {
		t.Fatalf("team-a again after its delete: %v, want ErrRetired", err)
	}
	events, err := s.AuditList(ctx, store.AuditListParams{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, e := range events {
		actions = append(actions, e.Action)
	}
	if len(actions) != 2 || actions[0] != "project.created" || actions[1] != "project.deleted" {
		t.Fatalf("audit = %v", actions)
	}
}

// testPersonTokens: a token minted for a person keeps the person and the
// groups of their sign-in ([] when none; nil only for a token from before
// the keeper kept them); one minted by hand has none.
func testPersonTokens(t *testing.T, b testdb.Backend) {
	s := b.Open(t)
	person := store.Person{Issuer: "https://idp.example", Subject: "u-1", Name: "Ada", Groups: []string{"devs", "ops"}}
	if _, err := s.TokenCreate(ctx, store.TokenCreateParams{Token: store.APIToken{ID: "tok_p", Name: "oidc-ada", Role: "viewer", Hash: "hp", Person: &person}, Actor: store.ActorOIDC}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.TokenCreate(ctx, store.TokenCreateParams{Token: store.APIToken{ID: "tok_h", Name: "hand", Role: "viewer", Hash: "hh"}, Actor: store.ActorKeeper}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.TokenGet(ctx, "tok_p"); err != nil || got.Person == nil || !reflect.DeepEqual(*got.Person, person) || got.CreatedBy != "oidc" {
		t.Fatalf("the person's token: %+v, %v", got, err)
	}
	if _, err := s.TokenCreate(ctx, store.TokenCreateParams{Token: store.APIToken{ID: "tok_n", Name: "oidc-bob", Role: "viewer", Hash: "hn",
		Person: &store.Person{Issuer: "https://idp.example", Subject: "u-2", Name: "Bob"}}, Actor: store.ActorOIDC}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.TokenGet(ctx, "tok_n"); err != nil || got.Person == nil || got.Person.Groups == nil || len(got.Person.Groups) != 0 {
		t.Fatalf("a person in no group: %+v, %v", got.Person, err)
	}
	if _, err := s.DB().ExecContext(ctx, `UPDATE api_tokens SET person_groups = NULL WHERE id = 'tok_n'`); err != nil {
		t.Fatal(err)
	}
	if got, err := s.TokenGet(ctx, "tok_n"); err != nil || got.Person == nil || got.Person.Groups != nil {
		t.Fatalf("a token from before the keeper kept the groups: %+v, %v", got.Person, err)
	}
	if got, err := s.TokenGetByHash(ctx, "hh"); err != nil || got.Person != nil {
		t.Fatalf("a token by hand: %+v, %v", got, err)
	}
}

// testOIDCCodes: a login code is taken once, also by two takers at once,
// and not after it expired.
func testOIDCCodes(t *testing.T, b testdb.Backend) {
	s := b.Open(t)
	now := time.Now().UTC()
	if err := s.OIDCCodePut(ctx, "c1", "sealed-1", now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := s.OIDCCodePut(ctx, "c-old", "sealed-old", now.Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	got := make(chan string, 8)
	for range 8 {
		wg.Go(func() {
			if v, err := s.OIDCCodeTake(ctx, "c1", now); err == nil {
				got <- v
			} else if !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrUnavailable) {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	close(got)
	var taken []string
	for v := range got {
		taken = append(taken, v)
	}
	if len(taken) != 1 || taken[0] != "sealed-1" {
		t.Fatalf("eight takers of one code got %v, want it once", taken)
	}
	if _, err := s.OIDCCodeTake(ctx, "c-old", now); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("an expired code: %v, want ErrNotFound", err)
	}
}
