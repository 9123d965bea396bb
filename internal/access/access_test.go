package access_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/soulstack/soulstack/internal/base"

	"github.com/soulstack/soulstack/internal/access"
	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/testdb"
)

// TestSignInAndWithdraw, on a real SQLite registry: a sign-in gets the
// strongest role its groups and bindings give where it asks (a keeper-wide
// role counts in every project), none is a NoRoleError; a person's token
// lapses when the binding that gave its role goes, and the withdrawal
// revokes it (and no hand-minted token).
func TestSignInAndWithdraw(t *testing.T) {
	ctx := context.Background()
	st := testdb.SQLite.Open(t)
	for _, p := range []string{"web", "db"} {
		if _, err := st.ProjectCreate(ctx, store.ProjectCreateParams{Project: store.Project{Name: p}, Actor: store.ActorKeeper}); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	a := access.New(st, &access.Roles{Issuer: "https://idp.test", Keeper: map[string]string{"sre": "operator"},
		Projects: map[string]map[string]string{"web": {"devs": "viewer"}}}, base.Base{Clock: clockwork.NewFakeClockAt(now)})
	ada := store.Person{Issuer: "https://idp.test", Subject: "u-ada", Name: "Ada@example.test"}
	if _, err := st.BindingPut(ctx, store.Binding{Project: "db", Kind: store.BindPerson, Subject: ada.Key(), Role: "admin"}, store.ActorKeeper); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		groups  []string
		project string
		want    access.Grant
	}{
		{[]string{"devs"}, "web", access.Grant{Role: "viewer", Project: "web"}},
		{[]string{"devs", "sre"}, "web", access.Grant{Role: "operator", Project: "web"}}, // keeper-wide beats the project's
		{[]string{"devs"}, "db", access.Grant{Role: "admin", Project: "db"}},             // her own binding
		{[]string{"sre"}, "", access.Grant{Role: "operator"}},                            // keeper-wide first
		{[]string{"devs"}, "", access.Grant{Role: "admin", Project: "db"}},               // else the first project by name
	} {
		got, err := a.SignIn(ctx, ada, c.groups, c.project)
		if err != nil || got != c.want {
			t.Errorf("SignIn(%v, %q) = %+v, %v; want %+v", c.groups, c.project, got, err, c.want)
		}
	}
	var none *access.NoRoleError
	if _, err := a.SignIn(ctx, store.Person{Issuer: "https://idp.test", Subject: "u-bob"}, []string{"devs"}, "db"); !errors.As(err, &none) {
		t.Errorf("bob in db: %v, want a NoRoleError", err)
	}

	tok, plain, err := a.Mint(ctx, ada, []string{"devs"}, access.Grant{Role: "admin", Project: "db"}, time.Hour)
	if err != nil || plain == "" || tok.Person == nil || tok.ExpiresAt == nil || !tok.ExpiresAt.Equal(now.Add(time.Hour)) || tok.Name != "oidc-ada" {
		t.Fatalf("Mint = %+v, %q, %v", tok, plain, err)
	}
	if n, err := a.WithdrawLapsed(ctx, "", store.ActorOIDC); err != nil || n != 0 {
		t.Fatalf("withdraw while the binding stands: %d, %v", n, err)
	}
	if err := st.BindingDelete(ctx, store.Binding{Project: "db", Kind: store.BindPerson, Subject: ada.Key()}, store.ActorKeeper); err != nil {
		t.Fatal(err)
	}
	if n, err := a.WithdrawLapsed(ctx, "db", store.ActorOIDC); err != nil || n != 1 {
		t.Fatalf("withdraw after the binding went: %d, %v; want 1 revoked", n, err)
	}
	if got, err := st.TokenGet(ctx, tok.ID); err != nil || got.RevokedAt == nil {
		t.Fatalf("ada's token after the withdrawal: %+v, %v", got, err)
	}
}
