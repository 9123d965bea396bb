package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/testdb"
)

// testSessions: a web session is stored, found by its hash, touched,
// deleted with its audit; revoking its token deletes it; an expired one
// goes when the next is created; one of an unknown token is refused.
func testSessions(t *testing.T, b testdb.Backend) {
	s := b.Open(t)
	for _, tok := range []store.APIToken{{ID: "tok_001", Name: "admin", Role: "admin", Hash: "h1"}, {ID: "tok_002", Name: "ops", Role: "operator", Hash: "h2"}} {
		if _, err := s.TokenCreate(ctx, store.TokenCreateParams{Token: tok, Actor: store.ActorKeeper}); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now().UTC().Truncate(time.Second)
	mk := func(hash, token string, created time.Time) store.WebSession {
		return store.WebSession{Hash: hash, KeyHash: "k-" + hash, TokenID: token, CreatedAt: created, ExpiresAt: created.Add(12 * time.Hour), LastSeenAt: created}
	}
	old := mk("s-old", "tok_001", now.Add(-13*time.Hour))
	for _, ws := range []store.WebSession{old, mk("s-ops", "tok_002", now)} {
		if err := s.SessionCreate(ctx, ws); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SessionCreate(ctx, mk("s-ghost", "tok_nope", now)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a session of an unknown token: %v, want ErrNotFound", err)
	}
	got, err := s.SessionGet(ctx, "s-ops")
	if err != nil || got.TokenID != "tok_002" || got.KeyHash != "k-s-ops" || !got.ExpiresAt.Equal(now.Add(12*time.Hour)) {
		t.Fatalf("get = %+v, %v", got, err)
	}
	if err := s.SessionTouch(ctx, "s-ops", now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.SessionGet(ctx, "s-ops"); !got.LastSeenAt.Equal(now.Add(time.Minute)) {
		t.Fatalf("touched session last seen %v", got.LastSeenAt)
	}
	// The first session had expired when the second was created.
	if _, err := s.SessionGet(ctx, "s-old"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the expired session: %v, want deleted", err)
	}
	if err := s.SessionCreate(ctx, mk("s-admin", "tok_001", now)); err != nil {
		t.Fatal(err)
	}
	if err := s.SessionDelete(ctx, "s-admin", "tok_001"); err != nil {
		t.Fatal(err)
	}
	if err := s.SessionDelete(ctx, "s-admin", "tok_001"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("deleting twice: %v", err)
	}
	if err := s.TokenRevoke(ctx, store.DeleteParams{Key: "tok_002", Actor: "tok_001"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SessionGet(ctx, "s-ops"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the revoked token's session: %v, want deleted", err)
	}
	var created, deleted int
	for _, e := range allEvents(t, s) {
		switch e.Action {
		case "session.created":
			created++
		case "session.deleted":
			deleted++
		}
	}
	if created != 3 || deleted != 1 {
		t.Fatalf("audit: %d session.created, %d session.deleted; want 3 and 1", created, deleted)
	}
}
