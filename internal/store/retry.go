package store

import (
	"context"
	"errors"
	"time"
)

// Transient reports whether err, as st translates it (Translator), is a
// database outage or a full disk — a refusal that retrying may cure. It
// returns the translated error; without a translator no error is
// transient.
func Transient(st any, err error) (bool, error) {
	t, ok := st.(Translator)
	if !ok || err == nil {
		return false, err
	}
	err = t.TranslateError(err)
	return errors.Is(err, ErrUnavailable) || errors.Is(err, ErrStorageFull), err
}

// Retry runs write until it succeeds, fails for a reason that is not
// transient (Transient), or limit has passed, backing off from 100 ms to
// 2 s between attempts; onRetry, when set, is told of each failed attempt
// that will be retried. It returns write's last error as write returned it.
func Retry(ctx context.Context, st any, limit time.Duration, write func(context.Context) error, onRetry func(attempt int, err error)) error {
	deadline := time.Now().Add(limit)
	delay := 100 * time.Millisecond
	for attempt := 0; ; attempt++ {
		err := write(ctx)
		transient, translated := Transient(st, err)
		if !transient || time.Now().Add(delay).After(deadline) || ctx.Err() != nil {
			return err
		}
		if onRetry != nil {
			onRetry(attempt, translated)
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(delay):
		}
		delay = min(2*delay, 2*time.Second)
	}
}
