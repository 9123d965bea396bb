package keeper

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/soulstack/soulstack/internal/base"

	"github.com/soulstack/soulstack/internal/config"
	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/store/postgres"
	"github.com/soulstack/soulstack/internal/store/sqlite"
	"github.com/soulstack/soulstack/internal/store/sqlstore"
)

// schemaCheckEvery is how often a serving keeper reads the database's
// schema version, to notice a newer keeper's migration.
const schemaCheckEvery = 2 * time.Second

// ExitSchemaNewer is the exit status of a keeper that refuses a database a
// newer keeper migrated, at start or while serving (EX_CONFIG): the unit's
// RestartPreventExitStatus keeps systemd from restarting it into the same
// refusal.
const ExitSchemaNewer = 78

// schemaLatest is the newest schema version this keeper's migrations know
// for the configured backend.
func schemaLatest(c config.Config) (int64, error) {
	versions := sqlite.Versions
	if c.DatabaseURL != "" {
		versions = postgres.Versions
	}
	vs, err := versions()
	if err != nil || len(vs) == 0 {
		return 0, err
	}
	return slices.Max(vs), nil
}

// watchSchema reads the database's schema version every schemaCheckEvery
// until ctx ends, and sends a *sqlstore.SchemaNewerError on the returned
// channel once the database is newer than latest: a keeper of a newer
// version migrated it while this one serves. A failed read is retried at
// the next check (the database may be restarting).
func watchSchema(ctx context.Context, st *sqlstore.Store, latest int64, b base.Base) <-chan error {
	clock, log := b.Clock, b.Log
	newer := make(chan error, 1)
	go func() {
		t := clock.NewTicker(schemaCheckEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.Chan():
			}
			v, err := st.SchemaVersion(ctx)
			switch {
			case err != nil && ctx.Err() == nil && !errors.Is(err, store.ErrUnavailable):
				log.Warn("read the database's schema version", "err", err)
			case err == nil && v > latest:
				newer <- &sqlstore.SchemaNewerError{Database: v, Keeper: latest}
				return
			}
		}
	}()
	return newer
}
