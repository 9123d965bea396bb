package ssh

import (
	"context"
	"errors"
	"fmt"
	"sync"

	gossh "golang.org/x/crypto/ssh"
)

// Pool keeps one connection per target for the length of a run. A target is
// its address, user, pinned host key and client key: a Get whose pinned host
// key or client key differs from an open connection's dials a connection of
// its own, so a connection made under one pin or one set of credentials is
// never handed to a caller holding others. It is safe for concurrent use:
// concurrent Gets for one target share a single dial. A connection that dies is dropped and the next Get dials
// again, verifying the host key learned on first contact even when the
// target pins none, so a changed key is never accepted on a reconnect.
type Pool struct {
	opts Options

	mu      sync.Mutex
	closed  bool
	entries map[connKey]*poolEntry
	learned map[string]string // host:port -> host key learned on first use
}

type poolEntry struct {
	done   chan struct{} // closed when the dial finished
	cancel context.CancelCauseFunc
	client *Client
	err    error
	gaveUp bool // the dialing caller's context ended, not the dial
}

// NewPool returns an empty pool whose connections use opts.
func NewPool(opts Options) *Pool {
	return &Pool{
		opts:    opts.WithDefaults(),
		entries: make(map[connKey]*poolEntry),
		learned: make(map[string]string),
	}
}

// Get returns the pool's connection to t, dialing it if there is none. If a
// Get that is dialing t is cancelled, the others waiting for that dial try
// again under their own contexts. The returned Client belongs to the pool:
// do not close it.
func (p *Pool) Get(ctx context.Context, t Target) (*Client, error) {
	key, err := keyOf(t)
	if err != nil {
		return nil, err // names the target already
	}
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, fmt.Errorf("ssh pool: get %s: %w", t, ErrClosed)
		}
		if e, ok := p.entries[key]; ok {
			if isDone(e.done) && e.client != nil && !e.client.alive() {
				delete(p.entries, key) // the connection died: dial again
				p.mu.Unlock()
				continue
			}
			p.mu.Unlock()
			select {
			case <-e.done:
			case <-ctx.Done():
				return nil, fmt.Errorf("ssh connect %s: %w", t, context.Cause(ctx))
			}
			if e.gaveUp && ctx.Err() == nil {
				continue // the dialer gave up, not the host
			}
			return e.client, e.err
		}
		dctx, cancel := context.WithCancelCause(ctx)
		e := &poolEntry{done: make(chan struct{}), cancel: cancel}
		p.entries[key] = e
		if t.HostKey == "" {
			t.HostKey = p.learned[t.Addr()]
		}
		p.mu.Unlock()

		c, err := dial(dctx, t, p.opts)
		cancel(nil)
		p.mu.Lock()
		switch {
		case err != nil:
			delete(p.entries, key) // a failed dial is not cached
		case p.closed:
			c.Close()
			c, err = nil, fmt.Errorf("ssh pool: get %s: %w", t, ErrClosed)
			delete(p.entries, key)
		default:
			if _, ok := p.learned[t.Addr()]; !ok {
				p.learned[t.Addr()] = c.HostKey()
			}
			if key.host == "" {
				// The connection verified the host key it presented: a
				// Get that pins that very key may share it.
				if pinned, _, _, _, err := gossh.ParseAuthorizedKey([]byte(c.HostKey())); err == nil {
					alias := key
					alias.host = gossh.FingerprintSHA256(pinned)
					if _, ok := p.entries[alias]; !ok {
						p.entries[alias] = e
					}
				}
			}
		}
		e.client, e.err = c, err
		e.gaveUp = err != nil && ctx.Err() != nil
		close(e.done)
		p.mu.Unlock()
		return c, err
	}
}

// Close closes every connection, cancels dials in progress and makes later
// Gets fail with ErrClosed.
func (p *Pool) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	entries := make([]*poolEntry, 0, len(p.entries))
	seen := make(map[*poolEntry]bool, len(p.entries))
	for _, e := range p.entries {
		if seen[e] {
			continue // an alias of an entry already listed
		}
		seen[e] = true
		e.cancel(ErrClosed)
		entries = append(entries, e)
	}
	p.mu.Unlock()
	var errs []error
	for _, e := range entries {
		<-e.done
		if e.client != nil {
			if err := e.client.Close(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// connKey identifies the connections a target may share: user@host:port,
// the fingerprint of the pinned host key (empty when none is pinned) and
// the fingerprint of the client key. Fingerprints rather than keys, so the
// pool holds no more key material than its targets; the same key with
// another comment is the same key.
type connKey struct {
	target string // user@host:port
	host   string // SHA256 fingerprint of the pinned host key, or ""
	client string // SHA256 fingerprint of the client key
}

func keyOf(t Target) (connKey, error) {
	signer, pinned, err := t.WithDefaults().parse()
	if err != nil {
		return connKey{}, err
	}
	k := connKey{target: t.String(), client: gossh.FingerprintSHA256(signer.PublicKey())}
	if pinned != nil {
		k.host = gossh.FingerprintSHA256(pinned)
	}
	return k, nil
}

func isDone(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
