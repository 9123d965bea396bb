package api

import (
	"context"
	"fmt"
	"math"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/soulstack/soulstack/internal/store"
)

// authLimiter limits failed authentications per client address with a
// token bucket: an address may fail burst times in a row, and gets one
// attempt back per interval. Successful authentications cost nothing.
//
// While an address has no attempt left it is limited: the API answers it
// 429 auth.rate_limited without looking its token up, unless the token is
// one the keeper has verified before (auth.AuthenticateKnown), so that a
// valid client is not slowed and a guessing one learns nothing. A limited
// period is one burst: the first refusal of each is reported (audited)
// once.
type authLimiter struct {
	burst    float64
	interval time.Duration
	now      func() time.Time

	mu      sync.Mutex
	clients map[string]*bucket
}

type bucket struct {
	tokens  float64
	last    time.Time
	limited bool // inside a burst of refusals
}

// maxTrackedClients bounds the limiter's memory; past it, addresses whose
// bucket is full again are forgotten.
const maxTrackedClients = 10000

func newAuthLimiter(burst int, interval time.Duration, now func() time.Time) *authLimiter {
	return &authLimiter{burst: float64(burst), interval: interval, now: now, clients: map[string]*bucket{}}
}

// refill brings b up to date; the caller holds l.mu.
func (l *authLimiter) refill(b *bucket, now time.Time) {
	if elapsed := now.Sub(b.last); elapsed > 0 {
		b.tokens = min(l.burst, b.tokens+float64(elapsed)/float64(l.interval))
		b.last = now
	}
}

// check reports whether host is limited now, and whether this is the
// first refusal of its burst.
func (l *authLimiter) check(host string) (limited, first bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.clients[host]
	if !ok {
		return false, false
	}
	l.refill(b, l.now())
	if b.tokens >= 1 {
		b.limited = false
		return false, false
	}
	first = !b.limited
	b.limited = true
	return true, first
}

// fail spends one attempt of host.
func (l *authLimiter) fail(host string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b, ok := l.clients[host]
	if !ok {
		if len(l.clients) >= maxTrackedClients {
			l.prune(now)
		}
		b = &bucket{tokens: l.burst, last: now}
		l.clients[host] = b
	}
	l.refill(b, now)
	b.tokens = max(0, b.tokens-1)
}

// prune forgets the addresses whose bucket is full; the caller holds l.mu.
func (l *authLimiter) prune(now time.Time) {
	for h, b := range l.clients {
		l.refill(b, now)
		if b.tokens >= l.burst {
			delete(l.clients, h)
		}
	}
}

// hostOf is the client address of a request's remote address, without
// the port. Headers such as X-Forwarded-For are not trusted: a client
// could set them.
func hostOf(remoteAddr string) string {
	if host, _, err := net.SplitHostPort(remoteAddr); err == nil {
		return host
	}
	return remoteAddr
}

// rateLimitedError: a limited client address presented a token that the
// keeper has not verified before.
type rateLimitedError struct {
	host       string
	retryAfter time.Duration
}

func (e *rateLimitedError) Error() string {
	return fmt.Sprintf("too many failed authentications from %s; try again in %s", e.host, retryAfterSeconds(e.retryAfter)+"s")
}

func retryAfterSeconds(d time.Duration) string {
	return strconv.Itoa(max(1, int(math.Ceil(d.Seconds()))))
}

// auditRateLimited records the start of a burst of refusals of host.
func (s *Server) auditRateLimited(ctx context.Context, host string) {
	err := s.auditStore.AuditRecord(context.WithoutCancel(ctx), store.AuditParams{
		Actor: store.Actor("anonymous"), Action: "auth.rate_limited", Object: "client/" + host,
		Payload: map[string]any{"client": host, "burst": int(s.limiter.burst), "interval": s.limiter.interval.String()},
	})
	if err != nil {
		s.log.Error("audit auth.rate_limited", "client", host, "err", err)
	}
	s.log.Warn("client address rate-limited after failed authentications", "client", host)
}
