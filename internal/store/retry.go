package store

import (
	"context"
	"errors"
	"time"
)

// Transient reports whether err is a database outage or a full disk
// (ErrUnavailable, ErrStorageFull) — a refusal that retrying may cure. The
// store marks its own errors so.
func Transient(err error) bool {
	return errors.Is(err, ErrUnavailable) || errors.Is(err, ErrStorageFull)
}

// Retry runs write until it succeeds, fails for a reason that is not
// transient (Transient), or limit has passed, backing off from 100 ms to
// 2 s between attempts; onRetry, when set, is told of each failed attempt
// that will be retried. It returns write's last error.
func Retry(ctx context.Context, limit time.Duration, write func(context.Context) error, onRetry func(attempt int, err error)) error {
	deadline := time.Now().Add(limit)
	delay := 100 * time.Millisecond
	for attempt := 0; ; attempt++ {
		err := write(ctx)
		if !Transient(err) || time.Now().Add(delay).After(deadline) || ctx.Err() != nil {
			return err
		}
		if onRetry != nil {
			onRetry(attempt, err)
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(delay):
		}
		delay = min(2*delay, 2*time.Second)
	}
}
