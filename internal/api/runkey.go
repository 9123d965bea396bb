package api

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/soulstack/soulstack/internal/auth"
	"github.com/soulstack/soulstack/internal/drift"
	"github.com/soulstack/soulstack/internal/store"
)

// Re-run key conflicts a token may cause: KeyConflictBurst at once, then
// one more every KeyConflictEvery. A token over its budget gets 429
// run.key_conflict_rate_limited for every keyed POST /v1/runs, whatever its
// content, until the budget refills.
const (
	KeyConflictBurst = 10
	KeyConflictEvery = time.Minute
)

// ErrKeyConflictsLimited: the token caused too many re-run key conflicts.
var ErrKeyConflictsLimited = errors.New("too many re-run key conflicts")

// keyConflictsLimitedError is ErrKeyConflictsLimited for one token, with
// when to come back.
type keyConflictsLimitedError struct {
	Token      string
	RetryAfter time.Duration
}

func (e *keyConflictsLimitedError) Error() string {
	return fmt.Sprintf("token %s: %v; retry in %s", e.Token, ErrKeyConflictsLimited, e.RetryAfter)
}

func (e *keyConflictsLimitedError) Unwrap() error { return ErrKeyConflictsLimited }

// keyConflicts is the per-token budget of re-run key conflicts. A token
// only ever learns about its own runs (keys are scoped to the creating
// token), so the budget does not hide an oracle; it bounds how fast one
// token can fill the audit log with run.key_conflict events.
type keyConflicts struct {
	mu sync.Mutex
	by map[string]*conflictBudget // by token id
}

type conflictBudget struct {
	lim *rate.Limiter
	// refused is set by the first 429 of a burst, so that a burst is
	// audited once.
	refused bool
}

func newKeyConflicts() *keyConflicts { return &keyConflicts{by: map[string]*conflictBudget{}} }

func (k *keyConflicts) budget(token string) *conflictBudget {
	b, ok := k.by[token]
	if !ok {
		if len(k.by) > 10000 {
			clear(k.by)
		}
		b = &conflictBudget{lim: rate.NewLimiter(rate.Every(KeyConflictEvery), KeyConflictBurst)}
		k.by[token] = b
	}
	return b
}

// check returns the refusal when token has no conflict left at now (nil
// otherwise), and whether it is the first refusal of the burst.
func (k *keyConflicts) check(token string, now time.Time) (*keyConflictsLimitedError, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	b := k.budget(token)
	left := b.lim.TokensAt(now)
	if left >= 1 {
		b.refused = false
		return nil, false
	}
	first := !b.refused
	b.refused = true
	wait := time.Duration((1 - left) * float64(KeyConflictEvery))
	return &keyConflictsLimitedError{Token: token, RetryAfter: wait.Truncate(time.Second) + time.Second}, first
}

// spend takes one conflict from token's budget.
func (k *keyConflicts) spend(token string, now time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.budget(token).lim.AllowN(now, 1)
}

// limitKeyConflicts refuses a keyed run create from a token over its
// conflict budget; the first refusal of a burst is audited.
func (s *Server) limitKeyConflicts(ctx context.Context, p auth.Principal, key string) error {
	refusal, first := s.keyConflicts.check(p.TokenID, s.now())
	if refusal == nil {
		return nil
	}
	if first {
		if aerr := s.auditStore.AuditRecord(ctx, store.AuditParams{
			Actor: p.Actor(), Action: "run.key_conflict_rate_limited", Object: "token/" + p.TokenID,
			Payload: map[string]any{"key": key, "burst": KeyConflictBurst, "every": KeyConflictEvery.String()},
		}); aerr != nil {
			return fmt.Errorf("audit key conflict limit: %w", aerr)
		}
	}
	return refusal
}

// keyConflict audits a run.key_conflict (the token's own key named its own
// run with other content) and spends one of the token's conflicts.
func (s *Server) keyConflict(ctx context.Context, p auth.Principal, key string, conflict error) error {
	s.keyConflicts.spend(p.TokenID, s.now())
	object := "run/"
	var se *store.Error
	if errors.As(conflict, &se) {
		object += strings.TrimPrefix(se.Ref, "run ")
	}
	if err := s.auditStore.AuditRecord(ctx, store.AuditParams{
		Actor: p.Actor(), Action: "run.key_conflict", Object: object, Payload: map[string]any{"key": key},
	}); err != nil {
		return fmt.Errorf("audit key conflict: %w", err)
	}
	return conflict
}

// reservedKeys are the run key namespaces of the keeper's own runs: drift
// checks, seed runs and remediations. A client's key may not start with
// one, so that no client run passes for one of them.
var reservedKeys = []string{drift.KeyPrefix, "seed:", drift.RemediateKeyPrefix, "drift-", "keeper:"}

// reservedKeyPrefix returns the reserved namespace key starts with, or "".
func reservedKeyPrefix(key string) string {
	k := strings.ToLower(strings.TrimSpace(key))
	for _, ns := range reservedKeys {
		if strings.HasPrefix(k, ns) {
			return ns
		}
	}
	return ""
}
