package ssh

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Pool keeps one connection per target (user@host:port) for the length of a
// run. It is safe for concurrent use: concurrent Gets for one target share
// a single dial. A connection that dies is dropped and the next Get dials
// again, verifying the host key learned on first contact even when the
// target pins none, so a changed key is never accepted on a reconnect.
type Pool struct {
	opts Options

	mu      sync.Mutex
	closed  bool
	entries map[string]*poolEntry
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
		entries: make(map[string]*poolEntry),
		learned: make(map[string]string),
	}
}

// Get returns the pool's connection to t, dialing it if there is none. If a
// Get that is dialing t is cancelled, the others waiting for that dial try
// again under their own contexts. The returned Client belongs to the pool:
// do not close it.
func (p *Pool) Get(ctx context.Context, t Target) (*Client, error) {
	key := t.String()
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
	for _, e := range p.entries {
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

func isDone(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
