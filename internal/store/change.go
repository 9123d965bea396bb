package store

import (
	"context"
	"sync"
	"time"
)

// Change is a committed change that other parts of the keeper react to:
// the SSH pool closes the connections of a soul that is gone, the agent
// bus cuts the session of a soul whose identity ended, the keeper's
// metrics count runs, VMs, joins and drift. Changes is the keeper's one
// typed event bus; On subscribes to one kind of change.
//
// What must not be lost when the keeper dies after a commit (a webhook, a
// drift record) does not ride this bus: it is queued in the committing
// transaction (the outbox: RunFinishParams.Enqueue,
// DriftRecordParams.Changed, sqlstore.WithFollowUps) and done at least
// once. A run's own events wake its streams through the runner's hub, not
// here: they are many per second and not changes of the registries.
//
// Delivery: a Store given a *Changes (sqlstore.WithChanges) publishes a
// mutation's changes after its transaction has committed, never for one
// that rolled back, to every subscriber of this keeper process, in the
// order they subscribed, before the mutating call returns. A subscriber
// runs with the caller's context values but not its cancellation (the
// change is committed; reacting to it is due) and bounds its own time.
// Each keeper is told only of the changes it made itself: the keepers
// that share one PostgreSQL learn of the others' changes by their own
// sweeps (the bus revalidates sessions every six heartbeats, the SSH pool
// closes idle connections), as they always have. A keeper that crashes
// between commit and delivery takes its subscribers' state with it.
type Change interface{ change() }

// SoulGone: a soul was deleted from the registry, or marked destroyed by
// a cloud destroy (Destroyed). Soul is the record as it was before.
type SoulGone struct {
	Soul      Soul
	Destroyed bool
}

// CertRenewed: a soul's client certificate serial was replaced; OldSerial
// no longer admits it.
type CertRenewed struct {
	SID       string
	OldSerial string
	Serial    string
}

// RunCreated: a run was accepted (Pending), in Mode (apply or check).
type RunCreated struct {
	ID      string
	Project string
	Mode    string
}

// RunFinished: a run ended (Phase is terminal); ErrorCode is its error's
// code when it did not succeed. CreatedAt, StartedAt (zero for a run
// that never started) and FinishedAt time its wait and its work.
type RunFinished struct {
	ID         string
	Project    string
	Mode       string
	Phase      string
	ErrorCode  string
	CreatedAt  time.Time
	StartedAt  time.Time
	FinishedAt time.Time
}

// CloudProvisioned: a create's VMs were registered as souls (SIDs) of
// Project through Provider.
type CloudProvisioned struct {
	Provider string
	Project  string
	SIDs     []string
}

// CloudDestroyed: a destroy ended; Destroyed are the VMs the driver
// destroyed now, AlreadyGone those it found gone. The souls it marked
// destroyed are each a SoulGone too.
type CloudDestroyed struct {
	Provider    string
	Project     string
	Destroyed   []string
	AlreadyGone []string
}

// SoulJoined: a soul used its bootstrap token and is active.
type SoulJoined struct {
	SID string
}

// DriftChanged: a check changed the drift state of one of a soul's seeds.
type DriftChanged struct {
	SID    string
	SeedID int64
	From   string
	To     string
}

func (SoulGone) change()         {}
func (CertRenewed) change()      {}
func (RunCreated) change()       {}
func (RunFinished) change()      {}
func (CloudProvisioned) change() {}
func (CloudDestroyed) change()   {}
func (SoulJoined) change()       {}
func (DriftChanged) change()     {}

// On subscribes fn to the changes of type T alone.
func On[T Change](c *Changes, fn func(ctx context.Context, change T)) {
	c.Subscribe(func(ctx context.Context, ch Change) {
		if t, ok := ch.(T); ok {
			fn(ctx, t)
		}
	})
}

// Subscriber is told of one committed change (see Change for when).
type Subscriber func(ctx context.Context, c Change)

// Changes delivers committed changes to the keeper's subscribers. The
// zero value has none. Subscribe while the keeper is being built, before
// it serves.
type Changes struct {
	mu   sync.RWMutex
	subs []Subscriber
}

// Subscribe adds fn to the subscribers.
func (c *Changes) Subscribe(fn Subscriber) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.subs = append(c.subs, fn)
}

// Publish delivers each change to every subscriber in turn; ctx's
// cancellation does not reach them.
func (c *Changes) Publish(ctx context.Context, changes ...Change) {
	if c == nil || len(changes) == 0 {
		return
	}
	c.mu.RLock()
	subs := c.subs
	c.mu.RUnlock()
	ctx = context.WithoutCancel(ctx)
	for _, ch := range changes {
		for _, fn := range subs {
			fn(ctx, ch)
		}
	}
}
