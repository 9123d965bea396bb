package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/soulstack/soulstack/internal/module"
	"github.com/soulstack/soulstack/internal/store"
)

// CodeJoinPending: a soul that joins by itself had not joined (so its SSH
// host key was not pinned) by the step's deadline or the ready timeout.
const CodeJoinPending = "soul.join_pending"

// joinPoll is how often awaitJoin reads the soul again.
const joinPoll = 250 * time.Millisecond

// awaitJoin waits, within the step's deadline or else the ready timeout,
// until a soul that joins by itself (Connection.AwaitJoin) has its host
// key pinned by its join, or is destroyed, and returns it: SSH to such a
// soul never trusts the first key presented.
func (s *Souls) awaitJoin(ctx context.Context, sid string) (store.Soul, error) {
	wctx := ctx
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, s.readyTimeout)
		defer cancel()
	}
	tick := time.NewTicker(joinPoll)
	defer tick.Stop()
	for {
		so, err := s.store.SoulGet(wctx, sid)
		if err == nil && (so.Connection.HostKey != "" || so.Status == store.SoulDestroyed) {
			s.mu.Lock()
			s.souls[sid] = so
			s.mu.Unlock()
			return so, nil
		}
		if err != nil && wctx.Err() == nil {
			return store.Soul{}, err
		}
		select {
		case <-tick.C:
		case <-wctx.Done():
			if ctx.Err() != nil {
				return store.Soul{}, fmt.Errorf("wait for soul %s to join: %w", sid, context.Cause(ctx))
			}
			return store.Soul{}, &module.Error{Code: CodeJoinPending, Message: fmt.Sprintf(
				"soul %s joins by itself and had not joined after %s: its SSH host key is pinned when it joins, never trusted on first contact", sid, s.readyTimeout)}
		}
	}
}
