package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/soulstack/soulstack/internal/module"
	"github.com/soulstack/soulstack/internal/store"
)

// StoreRetryFor bounds how long a target retries a registry write that
// the database refused for a passing reason (store.ErrUnavailable,
// store.ErrStorageFull, as the store's store.Translator says) before the
// target fails with store.unavailable or store.full.
const StoreRetryFor = 10 * time.Second

// retryStore runs write until it succeeds, fails for another reason, or
// StoreRetryFor has passed. A write still refused for a passing reason
// fails with a module error whose code says so (store.unavailable,
// store.full), not a generic module.failed.
func retryStore(ctx context.Context, st store.Store, write func(context.Context) error) error {
	t, ok := st.(store.Translator)
	if !ok {
		return write(ctx)
	}
	deadline := time.Now().Add(StoreRetryFor)
	delay := 100 * time.Millisecond
	for {
		err := t.TranslateError(write(ctx))
		transient := errors.Is(err, store.ErrUnavailable) || errors.Is(err, store.ErrStorageFull)
		if !transient {
			return err
		}
		if time.Now().Add(delay).After(deadline) || ctx.Err() != nil {
			code := "store.unavailable"
			if errors.Is(err, store.ErrStorageFull) {
				code = "store.full"
			}
			return &module.Error{Code: code, Message: fmt.Sprintf("the keeper's registry refused the write for %s: %v", StoreRetryFor, err), Err: err}
		}
		select {
		case <-ctx.Done():
		case <-time.After(delay):
		}
		delay = min(2*delay, 2*time.Second)
	}
}
