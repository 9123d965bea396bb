package keeper

import (
	"context"
	"time"

	"github.com/soulstack/soulstack/internal/store"
)

// rechecker is the part of the bus the registry tells about identity
// changes (*bus.Server).
type rechecker interface {
	Recheck(ctx context.Context, sids ...string) []string
}

// revokingStore is the registry as the keeper uses it when the agent bus
// is on: after a change that ends a soul's identity — SoulDelete, the
// CloudDestroy cascade, SoulRenewCert replacing the serial — it has the
// bus recheck those souls at once, so the agent of a deleted or destroyed
// soul, or the session of a superseded certificate, is disconnected
// before the call returns instead of at the next revalidation sweep. Only
// the keeper that made the change knows of it: the other keepers on one
// PostgreSQL (and their bus connections) keep the sweep.
type revokingStore struct {
	store.Store
	bus rechecker
}

// recheck runs even when the caller's context has ended: the change is
// committed, its revocation is due.
func (s revokingStore) recheck(ctx context.Context, sids ...string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	s.bus.Recheck(ctx, sids...)
}

// SoulDelete deletes the soul and cuts its agent off.
func (s revokingStore) SoulDelete(ctx context.Context, p store.DeleteParams) error {
	if err := s.Store.SoulDelete(ctx, p); err != nil {
		return err
	}
	s.recheck(ctx, p.Key)
	return nil
}

// CloudDestroy runs the destroy cascade and cuts off the agents of the
// souls it destroyed (a soul the cascade left alone keeps its session).
func (s revokingStore) CloudDestroy(ctx context.Context, p store.CloudDestroyParams) (store.CloudCascade, error) {
	c, err := s.Store.CloudDestroy(ctx, p)
	if err != nil {
		return c, err
	}
	s.recheck(ctx, p.SIDs...)
	return c, nil
}

// SoulRenewCert replaces the soul's certificate serial and closes the
// session of the old one: the agent reconnects with the new certificate.
func (s revokingStore) SoulRenewCert(ctx context.Context, p store.SoulRenewParams) (store.Soul, error) {
	so, err := s.Store.SoulRenewCert(ctx, p)
	if err != nil {
		return so, err
	}
	s.recheck(ctx, p.SID)
	return so, nil
}
