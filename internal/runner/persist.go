package runner

import (
	"context"
	"errors"
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
	deadline := time.Now().Add(PersistRetryFor)
	delay := 100 * time.Millisecond
	for attempt := 0; ; attempt++ {
		err := write(ctx)
		if err == nil || !r.transient(err) || time.Now().Add(delay).After(deadline) {
			if err != nil && attempt > 0 {
				r.log.Error("database write still failing; giving up", "what", what, "attempts", attempt+1, "err", err)
			} else if attempt > 0 {
				r.log.Info("database write succeeded after retries", "what", what, "attempts", attempt+1)
			}
			return err
		}
		if attempt == 0 {
			r.log.Warn("database write failed; retrying", "what", what, "err", err, "for", PersistRetryFor)
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(delay):
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// transient reports whether err is a database outage or a full disk, as
// the store translates it (store.Translator); without a translator no
// error is.
func (r *Runner) transient(err error) bool {
	t, ok := r.cfg.Store.(store.Translator)
	if !ok {
		return false
	}
	err = t.TranslateError(err)
	return errors.Is(err, store.ErrUnavailable) || errors.Is(err, store.ErrStorageFull)
}
