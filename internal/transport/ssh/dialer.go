package ssh

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/soulstack/soulstack/internal/transport"
)

// Dialer is the SSH transport's transport.Dialer for one run, over a pool
// that outlives runs (Pool.Dialer). It hands out the pool's connections
// through the run's Scope (a warm connection's host key checked again for
// this run), pins a soul's host key on first contact and refuses any other
// later, records every mismatch (transport.HostKeys), and waits for the
// cloud-init of a soul that awaits readiness before it returns.
type Dialer struct {
	scope *Scope
	keys  transport.HostKeys
}

var _ transport.Dialer = (*Dialer)(nil)

// Dialer returns a dialer for one run over p, pinning and checking host
// keys in keys.
func (p *Pool) Dialer(keys transport.HostKeys) transport.Dialer {
	return &Dialer{scope: p.Scope(), keys: keys}
}

// Dial returns a connection to peer (see Dialer). A host that presents
// another key than the pinned one fails with ErrHostKeyMismatch, recorded
// first; a soul whose cloud-init failed, or cannot be told to have
// finished, fails with a *ReadyError.
func (d *Dialer) Dial(ctx context.Context, peer transport.Peer) (transport.Conn, error) {
	retry := peer.Retry
	if peer.AwaitReady && retry == (transport.RetryPolicy{}) {
		retry = ReadyConnectRetry
	}
	var key []byte
	if peer.Key != nil {
		var err error
		if key, err = peer.Key(ctx); err != nil {
			return nil, err
		}
	}
	// A soul that is not ready may refuse the key until its cloud-init
	// has written it: that is retried too, within the policy.
	t := Target{Address: peer.Address, Port: peer.Port, User: peer.User, PrivateKey: key, HostKey: peer.HostKey, Retry: retry, RetryAuth: peer.AwaitReady}
	c, err := d.scope.Get(ctx, t)
	if err == nil && peer.HostKey == "" {
		err = d.pin(ctx, peer.SID, t, c.HostKey())
	}
	if err != nil {
		if errors.Is(err, ErrHostKeyMismatch) {
			var m *HostKeyMismatchError
			pinned, presented := "", ""
			if errors.As(err, &m) {
				pinned, presented = m.Pinned, m.Presented
			}
			if aerr := d.keys.Mismatch(context.WithoutCancel(ctx), peer.SID, t.Addr(), pinned, presented); aerr != nil {
				return nil, fmt.Errorf("%w (and its audit event failed: %v)", err, aerr)
			}
		}
		return nil, err
	}
	if peer.AwaitReady {
		if err := awaitReady(ctx, c, peer.SID, peer.ReadyTimeout); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// pin records the host key a soul presented on first contact. A key
// pinned meanwhile by another run must be the same one.
func (d *Dialer) pin(ctx context.Context, sid string, t Target, hostKey string) error {
	pinned, err := d.keys.Pin(ctx, sid, hostKey)
	if err != nil {
		return err
	}
	if !sameKey(pinned, hostKey) {
		return &HostKeyMismatchError{Addr: t.Addr(), Pinned: pinned, Presented: hostKey}
	}
	return nil
}

// sameKey compares two authorized_keys lines by type and key, not comment.
func sameKey(a, b string) bool {
	fa, fb := strings.Fields(a), strings.Fields(b)
	return len(fa) >= 2 && len(fb) >= 2 && fa[0] == fb[0] && fa[1] == fb[1]
}
