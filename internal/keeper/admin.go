package keeper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/soulstack/soulstack/internal/base"

	"github.com/soulstack/soulstack/internal/config"
	"github.com/soulstack/soulstack/internal/store"
)

// BootstrapAdminToken mints an admin token from the keeper's host when no
// active (unrevoked, unexpired) admin token exists — or, with force, in any
// case — and writes it to <data-dir>/admin.token (0600), replacing the file
// atomically. It is what `keeper token bootstrap` runs: whoever can open
// the database on the host is trusted already, so the audit actor is
// store.ActorHost. With an active admin token and no force it fails with
// store.ErrActiveAdmin naming that token, and on a registry without any
// token with ErrNoTokens; either way it writes nothing. It opens the
// database c names with the serving keeper's audit key, and never makes a
// SQLite database that is not there.
func BootstrapAdminToken(ctx context.Context, c config.Config, force bool) (id, path string, err error) {
	if c.DatabaseURL == "" {
		if _, err := os.Stat(c.SQLitePath()); err != nil {
			return "", "", fmt.Errorf("no keeper database at %s: pass the keeper's --data-dir, --database-url or --config", c.SQLitePath())
		}
	}
	st, err := openStoreKeyed(ctx, c)
	if err != nil {
		return "", "", err
	}
	defer st.Close()
	some, err := st.TokenList(ctx, store.ListParams{Limit: 1})
	if err != nil {
		return "", "", err
	}
	if len(some) == 0 {
		return "", "", ErrNoTokens
	}
	if err := os.MkdirAll(c.DataDir, 0o700); err != nil {
		return "", "", fmt.Errorf("create data dir: %w", err)
	}
	path = c.AdminTokenPath()
	id, _, err = writeAdminToken(path, func(t store.APIToken) (bool, error) {
		if _, err := st.TokenAdminBootstrap(ctx, store.TokenAdminParams{Token: t, Actor: store.ActorHost, Force: force}); err != nil {
			return false, err
		}
		return true, nil
	})
	return id, path, err
}

// ErrNoTokens: the registry has no API token at all, so it is not (yet)
// a keeper's registry; keeper serve makes the first admin token itself.
var ErrNoTokens = errors.New("the registry has no API token at all")

// AdminExpiryWarning is how long before the last active admin token
// expires the keeper starts to warn in its log.
const AdminExpiryWarning = 7 * 24 * time.Hour

// adminCheckEvery is how often a serving keeper looks at its admin tokens.
const adminCheckEvery = time.Hour

// watchAdminTokens warns in the log when no active admin token is left, or
// when every active one expires within AdminExpiryWarning: at start, then
// every adminCheckEvery until ctx ends or stop is called (stop waits for
// the watcher to return).
func watchAdminTokens(ctx context.Context, st tokenLister, b base.Base) (stop func()) {
	clock, log := b.Clock, b.Log
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := clock.NewTicker(adminCheckEvery)
		defer tick.Stop()
		for {
			warnAdminTokens(ctx, st, log, clock.Now())
			select {
			case <-ctx.Done():
				return
			case <-tick.Chan():
			}
		}
	}()
	return func() { cancel(); wg.Wait() }
}

// warnAdminTokens logs the warning for the admin tokens active at now, if
// one is due.
func warnAdminTokens(ctx context.Context, st tokenLister, log *slog.Logger, now time.Time) {
	last, active, err := lastAdmin(ctx, st, now)
	switch {
	case err != nil:
		if ctx.Err() == nil {
			log.Warn("check admin API tokens", "err", err)
		}
	case active == 0:
		log.Warn("no active admin API token is left, so nobody can manage tokens: run `keeper token bootstrap` on this host to mint one")
	case last.ExpiresAt != nil && last.ExpiresAt.Sub(now) < AdminExpiryWarning:
		log.Warn("the last active admin API token expires soon: create another admin token, or after it expired run `keeper token bootstrap` on this host",
			"id", last.ID, "expires_at", last.ExpiresAt.UTC().Format(time.RFC3339), "expires_in", last.ExpiresAt.Sub(now).Round(time.Minute).String())
	}
}

// tokenLister is the registry read the admin-token watch makes.
type tokenLister interface {
	TokenList(ctx context.Context, p store.ListParams) ([]store.APIToken, error)
}

// lastAdmin returns the active admin token that stays active longest (one
// that never expires, if any) and how many are active at now.
func lastAdmin(ctx context.Context, st tokenLister, now time.Time) (store.APIToken, int, error) {
	var last store.APIToken
	active := 0
	after := ""
	for {
		page, err := st.TokenList(ctx, store.ListParams{Limit: 1000, After: after})
		if err != nil {
			return last, 0, err
		}
		for _, t := range page {
			if t.Role != "admin" || !t.Active(now) {
				continue
			}
			active++
			if active == 1 || last.ExpiresAt != nil && (t.ExpiresAt == nil || t.ExpiresAt.After(*last.ExpiresAt)) {
				last = t
			}
		}
		if len(page) < 1000 {
			return last, active, nil
		}
		after = page[len(page)-1].ID
	}
}
