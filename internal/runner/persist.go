package runner

import (
	"context"
	"time"

	"github.com/soulstack/soulstack/internal/store"
)

// PersistRetryFor bounds how long an execution retries a write its
// database refused for a passing reason (store.ErrUnavailable: down,
// restarting, connection cut; store.ErrStorageFull: no space) before it
// gives up on it. It is shorter than StaleAfter, so that a keeper that
// cannot write for longer than its lease lets the run go rather than race
// the keeper that takes it over.
const PersistRetryFor = 10 * time.Second

// persist runs write until it succeeds, fails for a reason that retrying
// does not cure, or PersistRetryFor has passed; the first retry is logged.
// A database that blinks (PostgreSQL restarted, a failover) then costs the
// run a pause, not its step's record.
func (r *Runner) persist(ctx context.Context, what string, write func(context.Context) error) error {
	retried := 0
	err := store.Retry(ctx, r.persistFor(), write, func(attempt int, err error) {
		retried = attempt + 1
		if attempt == 0 {
			r.log.Warn("database write failed; retrying", "what", what, "err", err, "for", r.persistFor())
		}
	})
	switch {
	case err != nil && retried > 0:
		r.log.Error("database write still failing; giving up", "what", what, "attempts", retried+1, "err", err)
	case retried > 0:
		r.log.Info("database write succeeded after retries", "what", what, "attempts", retried+1)
	}
	return err
}

// persistFor is how long a write is retried: PersistRetryFor, or less
// under a lease so short that it would outlast it.
func (r *Runner) persistFor() time.Duration {
	return min(PersistRetryFor, r.cfg.Lease.giveUp()-r.cfg.Lease.Heartbeat)
}

// transient reports whether err is a database outage or a full disk, as
// the store marks it.
func (r *Runner) transient(err error) bool { return store.Transient(err) }
