package auth_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/auth"
	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/testdb"
)

// slowLookup holds TokenGetByHash until release is closed, after telling
// started, so that a test can revoke a token while a lookup is under way.
type slowLookup struct {
	store.Store
	started chan struct{}
	release chan struct{}
}

func (s *slowLookup) TokenGetByHash(ctx context.Context, hash string) (store.APIToken, error) {
	t, err := s.Store.TokenGetByHash(ctx, hash)
	if s.started != nil {
		close(s.started)
		s.started = nil
		<-s.release
	}
	return t, err
}

// TestAuthenticatorForgetsRevokedToken revokes a token while a lookup that
// read it as active is under way: the stale answer must not be cached, so
// the next request is refused at once, not CacheTTL later.
func TestAuthenticatorForgetsRevokedToken(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := testdb.SQLite.Open(t)
	plain, id, hash, err := auth.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range []store.APIToken{{ID: "tok_admin", Name: "admin", Role: "admin", Hash: "other"}, {ID: id, Name: "ci", Role: "operator", Hash: hash}} {
		if _, err := st.TokenCreate(ctx, store.TokenCreateParams{Token: tk, Actor: store.ActorKeeper}); err != nil {
			t.Fatal(err)
		}
	}
	slow := &slowLookup{Store: st, started: make(chan struct{}), release: make(chan struct{})}
	started := slow.started
	a := auth.NewAuthenticator(slow, nil)
	done := make(chan error, 1)
	go func() {
		_, err := a.Authenticate(ctx, "Bearer "+plain)
		done <- err
	}()
	<-started // the lookup read the token while it was active
	if err := st.TokenRevoke(ctx, store.DeleteParams{Key: id, Actor: "tok_admin"}); err != nil {
		t.Fatal(err)
	}
	a.Forget(id)
	close(slow.release)
	if err := <-done; err != nil {
		t.Fatalf("the request that began before the revocation: %v", err)
	}
	if _, err := a.Authenticate(ctx, "Bearer "+plain); !errors.Is(err, auth.ErrInvalidToken) {
		t.Fatalf("after revoke and Forget: %v, want ErrInvalidToken", err)
	}
	// Expiry needs no lookup: a cached token stops working when it expires.
	exp := time.Now().Add(time.Hour)
	plain2, id2, hash2, _ := auth.NewToken()
	if _, err := st.TokenCreate(ctx, store.TokenCreateParams{Token: store.APIToken{ID: id2, Name: "brief", Role: "viewer", Hash: hash2, ExpiresAt: &exp}, Actor: "tok_admin"}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	clock := auth.NewAuthenticator(st, func() time.Time { return now })
	if _, err := clock.Authenticate(ctx, "Bearer "+plain2); err != nil {
		t.Fatal(err)
	}
	now = exp
	if _, err := clock.Authenticate(ctx, "Bearer "+plain2); !errors.Is(err, auth.ErrInvalidToken) {
		t.Fatalf("cached token at its expiry: %v, want ErrInvalidToken", err)
	}
}
