package ssh

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	gossh "golang.org/x/crypto/ssh"
)

// Scope is one run's view of a Pool that outlives runs. Its Get hands out
// the pool's connections like Pool.Get, except that the first time a scope
// would reuse a connection made before it, it first checks that the
// target's listener still presents the pinned host key (Pool.CheckHostKey:
// TCP connect and key exchange only, no authentication, no session). A
// warm connection is tied to the server process that accepted it, which
// outlives a restart of the listener: without the check, a host whose key
// changed (rebuilt, or someone else answering at its address) would keep
// being reached over the old connection and never refused.
//
// A presented key that differs fails the Get with ErrHostKeyMismatch and
// takes the warm connection out of the pool (closed once the commands other
// runs still have on it end); a listener that cannot be reached does the
// same and the Get dials afresh, failing as a cold run would. Later Gets of
// the same target in the scope reuse the checked connection without a
// check. A connection the scope dialed itself was verified by its own
// handshake. With Options.HostKeyRecheck, a pinned target's warm connection
// proven within that time is not checked again: a key change is then
// noticed within that time instead of at the next run.
type Scope struct {
	pool *Pool

	mu      sync.Mutex
	checked map[connKey]*scopeCheck
}

type scopeCheck struct {
	done chan struct{}
	ok   bool
}

// Scope returns a new scope over p; scopes are cheap and need no closing.
func (p *Pool) Scope() *Scope { return &Scope{pool: p, checked: map[connKey]*scopeCheck{}} }

// Get returns a connection to t, verified for this scope; see Scope.
func (s *Scope) Get(ctx context.Context, t Target) (*Client, error) {
	key, err := keyOf(t)
	if err != nil {
		return nil, err
	}
	for {
		s.mu.Lock()
		ch, ok := s.checked[key]
		if ok {
			s.mu.Unlock()
			select {
			case <-ch.done:
			case <-ctx.Done():
				return nil, fmt.Errorf("ssh connect %s: %w", t, context.Cause(ctx))
			}
			if !ch.ok {
				continue // that attempt failed: this Get tries on its own
			}
			c, _, err := s.pool.get(ctx, t)
			if err != nil {
				return nil, err
			}
			return c, nil
		}
		ch = &scopeCheck{done: make(chan struct{})}
		s.checked[key] = ch
		s.mu.Unlock()

		c, err := s.first(ctx, t)
		s.mu.Lock()
		if err != nil {
			delete(s.checked, key)
		}
		ch.ok = err == nil
		close(ch.done)
		s.mu.Unlock()
		return c, err
	}
}

// first is the scope's first Get of t.
func (s *Scope) first(ctx context.Context, t Target) (*Client, error) {
	c, fresh, err := s.pool.get(ctx, t)
	if err != nil || fresh {
		return c, err
	}
	pin := t.WithDefaults().HostKey
	now := s.pool.opts.Now()
	if r := s.pool.opts.HostKeyRecheck; r > 0 && pin != "" && now.Sub(time.Unix(0, c.verified.Load())) < r {
		// Proven recently enough (the connection is the pool's under
		// this pin's fingerprint, so the key proven is the pinned one).
		return c, nil
	}
	want := pin
	if want == "" {
		want = c.HostKey() // verified when the connection was made
	}
	err = s.pool.CheckHostKey(ctx, t, want)
	if err == nil {
		c.verified.Store(now.UnixNano())
		return c, nil
	}
	s.pool.retireClient(c)
	if (pin != "" && errors.Is(err, ErrHostKeyMismatch)) || ctx.Err() != nil {
		return nil, err
	}
	// The listener did not answer the check, or, for a target that pins
	// no key, presents another than the warm connection's (the caller
	// would pin a key the host no longer has): the warm connection cannot
	// be vouched for, so the target is dialed as on a cold run, with its
	// retry policy and its precise error.
	c, _, err = s.pool.get(ctx, t)
	return c, err
}

// errProbed ends a CheckHostKey handshake once the host key is known.
var errProbed = errors.New("host key read")

// CheckHostKey connects to t's address, runs the SSH key exchange and
// compares the host key the server proves it holds with want (authorized_keys
// format), without authenticating: a few milliseconds of a server's time,
// against a full login and session. It returns nil when they match, a
// *ConnectError of kind ErrHostKeyMismatch when they differ, and the
// connection's error (not retried) when the server cannot be reached.
func (p *Pool) CheckHostKey(ctx context.Context, t Target, want string) error {
	t = t.WithDefaults()
	pinned, _, _, _, err := gossh.ParseAuthorizedKey([]byte(want))
	if err != nil {
		return &ConnectError{Addr: t.Addr(), User: t.User, Kind: ErrInvalidTarget, Err: fmt.Errorf("host key to check: %w", err)}
	}
	ctx, cancel := context.WithTimeout(ctx, t.ConnectTimeout)
	defer cancel()
	addr := t.Addr()
	conn, err := p.opts.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("ssh check host key %s: %w", addr, err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	var presented gossh.PublicKey
	cfg := &gossh.ClientConfig{
		Config:        gossh.Config{KeyExchanges: keyExchanges},
		User:          t.User,
		ClientVersion: "SSH-2.0-SoulStack",
		HostKeyCallback: func(_ string, _ net.Addr, key gossh.PublicKey) error {
			presented = key
			return errProbed // no authentication: the key is all we came for
		},
		HostKeyAlgorithms: algorithmsFor(pinned),
	}
	_, _, _, err = gossh.NewClientConn(conn, addr, cfg)
	if presented == nil {
		if ctx.Err() != nil {
			return fmt.Errorf("ssh check host key %s: %w", addr, context.Cause(ctx))
		}
		return fmt.Errorf("ssh check host key %s: %w", addr, err)
	}
	if !keysEqual(pinned, presented) {
		return &ConnectError{Addr: addr, User: t.User, Attempts: 1, Kind: ErrHostKeyMismatch, Err: &HostKeyMismatchError{
			Addr:         addr,
			Pinned:       gossh.FingerprintSHA256(pinned),
			Presented:    gossh.FingerprintSHA256(presented),
			PresentedKey: authorizedKey(presented),
		}}
	}
	return nil
}
