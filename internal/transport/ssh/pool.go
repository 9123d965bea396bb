package ssh

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

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
//
// A pool with Options.IdleTimeout outlives runs: a connection no command
// has used for that long is closed (Sweep, which the pool runs on its own
// every half timeout), and an idle connection is health-checked with a
// keepalive request before it is handed out again, a dead one redialled.
// A connection lost while a command runs on it still fails that command
// (ErrDisconnected): the pool never runs anything again by itself. Options.MaxIdle
// caps the idle connections kept. Callers that share such a pool across
// runs get connections through a Scope per run, which re-checks a warm
// connection's host key before the run's first use of it.
type Pool struct {
	opts Options

	mu      sync.Mutex
	closed  bool
	stop    chan struct{} // closed by Close: ends the sweeper
	entries map[connKey]*poolEntry
	learned map[string]string // host:port -> host key learned on first use
	stats   poolStats         // for Collector
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
	p := &Pool{
		opts:    opts.WithDefaults(),
		stop:    make(chan struct{}),
		entries: make(map[connKey]*poolEntry),
		learned: make(map[string]string),
	}
	if p.opts.IdleTimeout > 0 {
		go p.sweeper(p.opts.IdleTimeout / 2)
	}
	return p
}

func (p *Pool) sweeper(every time.Duration) {
	tk := time.NewTicker(every)
	defer tk.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-tk.C:
			p.Sweep()
		}
	}
}

// Sweep closes the connections no command has used for the pool's
// IdleTimeout, measured on Options.Now, and the least recently used idle
// ones beyond Options.MaxIdle, and returns how many it closed. It does
// nothing when the pool has no IdleTimeout.
func (p *Pool) Sweep() int {
	if p.opts.IdleTimeout <= 0 {
		return 0
	}
	before := p.opts.Now().Add(-p.opts.IdleTimeout)
	n := p.drop(func(_ connKey, c *Client) bool { return c.idleSince(before) })
	if p.opts.MaxIdle > 0 {
		n += p.trimIdle()
	}
	return n
}

// Drop closes the pool's connections to user@host:port (Target.String),
// whichever keys they were made with, in use or not: the soul behind them
// is gone. It returns how many it closed.
func (p *Pool) Drop(target string) int {
	return p.drop(func(k connKey, _ *Client) bool { return k.target == target })
}

// drop removes and closes the established connections match selects,
// aliases included.
func (p *Pool) drop(match func(connKey, *Client) bool) int {
	p.mu.Lock()
	var gone []*Client
	picked := map[*poolEntry]bool{}
	for k, e := range p.entries {
		if !isDone(e.done) || e.client == nil {
			continue
		}
		if picked[e] || match(k, e.client) {
			picked[e] = true
		}
	}
	for k, e := range p.entries {
		if picked[e] {
			delete(p.entries, k)
		}
	}
	for e := range picked {
		gone = append(gone, e.client)
	}
	p.mu.Unlock()
	for _, c := range gone {
		_ = c.Close()
	}
	return len(gone)
}

// Len returns the number of established connections the pool holds.
func (p *Pool) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	seen := map[*poolEntry]bool{}
	for _, e := range p.entries {
		if isDone(e.done) && e.client != nil {
			seen[e] = true
		}
	}
	return len(seen)
}

// Get returns the pool's connection to t, dialing it if there is none. If a
// Get that is dialing t is cancelled, the others waiting for that dial try
// again under their own contexts. The returned Client belongs to the pool:
// do not close it.
func (p *Pool) Get(ctx context.Context, t Target) (*Client, error) {
	c, _, err := p.get(ctx, t)
	return c, err
}

// get is Get, also reporting whether this call dialed the connection
// (fresh) rather than reusing one.
func (p *Pool) get(ctx context.Context, t Target) (_ *Client, fresh bool, _ error) {
	key, err := keyOf(t)
	if err != nil {
		return nil, false, err // names the target already
	}
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, false, fmt.Errorf("ssh pool: get %s: %w", t, ErrClosed)
		}
		if e, ok := p.entries[key]; ok {
			if isDone(e.done) && e.client != nil && !e.client.alive() {
				p.forget(e) // the connection died: dial again
				p.mu.Unlock()
				continue
			}
			p.mu.Unlock()
			if isDone(e.done) && e.client != nil && p.opts.IdleTimeout > 0 && e.client.busy.Load() == 0 && !e.client.healthy(ctx, min(HealthTimeout, t.WithDefaults().ConnectTimeout)) {
				if ctx.Err() != nil {
					return nil, false, fmt.Errorf("ssh connect %s: %w", t, context.Cause(ctx))
				}
				// Idle between runs and dead without a word, or behind
				// a link that no longer answers: dial again.
				p.mu.Lock()
				p.forget(e)
				p.mu.Unlock()
				_ = e.client.Close()
				continue
			}
			select {
			case <-e.done:
			case <-ctx.Done():
				return nil, false, fmt.Errorf("ssh connect %s: %w", t, context.Cause(ctx))
			}
			if e.gaveUp && ctx.Err() == nil {
				continue // the dialer gave up, not the host
			}
			return e.client, false, e.err
		}
		dctx, cancel := context.WithCancelCause(ctx)
		e := &poolEntry{done: make(chan struct{}), cancel: cancel}
		p.entries[key] = e
		if t.HostKey == "" && p.opts.IdleTimeout <= 0 {
			// Within one run the key learned first is the host's. A pool
			// that outlives runs leaves pinning to its callers: a host
			// rebuilt at the address meanwhile is theirs to judge.
			t.HostKey = p.learned[t.Addr()]
		}
		p.mu.Unlock()

		c, err := dial(dctx, t, p.opts)
		cancel(nil)
		if ctx.Err() == nil {
			p.dialed(err) // a dial its caller gave up on says nothing of the host
		}
		c, err = p.settle(key, e, t, c, err, ctx.Err() != nil)
		if err == nil && p.opts.MaxIdle > 0 {
			p.trimIdle()
		}
		return c, err == nil, err
	}
}

// settle records how entry e's dial of t ended and wakes its waiters: a
// failed dial is not cached (gaveUp: the dialer's context ended, not the
// host); a connection the pool was closed under is closed; a good one
// teaches the pool its host key, and is shared with a Get that pins that
// very key.
func (p *Pool) settle(key connKey, e *poolEntry, t Target, c *Client, err error, gaveUp bool) (*Client, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
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
	e.gaveUp = err != nil && gaveUp
	close(e.done)
	return c, err
}

// retireClient removes c from the pool and closes it once the commands
// running on it (other runs') have finished: no new one starts on it.
func (p *Pool) retireClient(c *Client) {
	p.mu.Lock()
	for k, e := range p.entries {
		if isDone(e.done) && e.client == c {
			delete(p.entries, k)
		}
	}
	p.mu.Unlock()
	c.retire()
}

// trimIdle closes the least recently used idle connections beyond
// Options.MaxIdle.
func (p *Pool) trimIdle() int {
	p.mu.Lock()
	var idle []*Client
	seen := map[*Client]bool{}
	for _, e := range p.entries {
		if isDone(e.done) && e.client != nil && !seen[e.client] && e.client.busy.Load() == 0 {
			seen[e.client] = true
			idle = append(idle, e.client)
		}
	}
	p.mu.Unlock()
	extra := len(idle) - p.opts.MaxIdle
	if extra <= 0 {
		return 0
	}
	sort.Slice(idle, func(i, j int) bool { return idle[i].lastUsed.Load() < idle[j].lastUsed.Load() })
	gone := map[*Client]bool{}
	for _, c := range idle[:extra] {
		gone[c] = true
	}
	return p.drop(func(_ connKey, c *Client) bool { return gone[c] && c.busy.Load() == 0 })
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
	close(p.stop)
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

// forget removes entry e and its aliases; p.mu is held.
func (p *Pool) forget(e *poolEntry) {
	for k, x := range p.entries {
		if x == e {
			delete(p.entries, k)
		}
	}
}

func isDone(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
