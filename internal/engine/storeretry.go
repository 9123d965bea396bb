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
// store.ErrStorageFull, as the store marks its errors) before the
// target fails with store.unavailable or store.full.
const StoreRetryFor = 10 * time.Second

// retryStore runs write until it succeeds, fails for another reason, or
// StoreRetryFor has passed. A write still refused for a passing reason
// fails with a module error whose code says so (store.unavailable,
// store.full), not a generic module.failed.
func retryStore(ctx context.Context, write func(context.Context) error) error {
	err := store.Retry(ctx, StoreRetryFor, write, nil)
	if store.Transient(err) {
		code := "store.unavailable"
		if errors.Is(err, store.ErrStorageFull) {
			code = "store.full"
		}
		return &module.Error{Code: code, Message: fmt.Sprintf("the keeper's registry refused the write for %s: %v", StoreRetryFor, err), Err: err}
	}
	return err
}
