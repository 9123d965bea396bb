package api

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/soulstack/soulstack/internal/base"

	"github.com/soulstack/soulstack/internal/store"
)

// JoinGuard bounds what refused joins cost the keeper, whoever sends them
// (the join routes take no API token): a budget of refusals per client
// address (past it 429 join.rate_limited before anything is looked up), a
// keeper-wide budget of refusals (past it every refused join is answered
// 429 too, valid tokens still succeed), and an audit of refusals in bursts:
// each refusal is a join.refused row naming its client, soul and reason
// (a rate-limited client's once per burst, as auth.rate_limited), at most
// JoinAuditRows of them per window keeper-wide, and the rest are counted
// into one join.refused summary (count, reasons, clients) written when the
// window ends. One guard serves
// every listener of a keeper (the API and the agent listener).
type JoinGuard struct {
	perClient *authLimiter
	keeper    *authLimiter
	st        Auditor
	log       *slog.Logger
	now       func() time.Time
	window    time.Duration

	mu      sync.Mutex
	started time.Time // the window's start
	rows    int       // join.refused rows written in the window
	sum     refusalSummary
	timer   *time.Timer
	closed  bool
}

// JoinAuditRows is how many refused joins per window the audit log names
// one by one; JoinAuditWindow the window.
const (
	JoinAuditRows   = 50
	JoinAuditWindow = time.Minute
)

// Keeper-wide refused joins: a burst of keeperRefusalBurst, then
// keeperRefusalsPerSecond.
const (
	keeperRefusalBurst      = 200
	keeperRefusalsPerSecond = 20
)

// maxSummaryClients is how many client addresses a summary lists.
const maxSummaryClients = 20

// refusalSummary counts the refusals of a window past JoinAuditRows.
type refusalSummary struct {
	count   int
	reasons map[string]int
	clients map[string]int
	first   time.Time
}

// Auditor records audit events: what the join guard writes its refusals to.
type Auditor interface {
	AuditRecord(ctx context.Context, p store.AuditParams) error
}

// NewJoinGuard returns the guard of a keeper's join routes: burst refused
// joins in a row per client address, then one per interval (0: 10 and
// 1 s); refusals are audited into st.
func NewJoinGuard(st Auditor, b base.Base, burst int, interval time.Duration) *JoinGuard {
	if burst <= 0 {
		burst = 10
	}
	if interval <= 0 {
		interval = time.Second
	}
	b.Init()
	log, now := b.Log, b.Clock.Now
	return &JoinGuard{
		perClient: newAuthLimiter(burst, interval, now),
		keeper:    newAuthLimiter(keeperRefusalBurst, time.Second/keeperRefusalsPerSecond, now),
		st:        st, log: log, now: now, window: JoinAuditWindow,
	}
}

// limited reports whether host is over its budget (check it before
// anything is looked up) and whether this is the first refusal of its
// burst, and whether the keeper is over its own budget.
func (g *JoinGuard) limited(host string) (client, first, keeper bool) {
	client, first = g.perClient.check(host)
	keeper, _ = g.keeper.check("*")
	return client, first, keeper
}

// refused spends one refusal of host and of the keeper, and audits it.
func (g *JoinGuard) refused(ctx context.Context, host, sid, reason string) {
	g.perClient.fail(host)
	g.keeper.fail("*")
	g.audit(ctx, host, sid, reason)
}

// audit records one refusal: a row while the window has room, else into
// the window's summary.
func (g *JoinGuard) audit(ctx context.Context, host, sid, reason string) {
	now := g.now()
	g.mu.Lock()
	if now.Sub(g.started) >= g.window {
		g.flushLocked(ctx)
		g.started, g.rows = now, 0
	}
	if g.rows < JoinAuditRows {
		g.rows++
		g.mu.Unlock()
		g.record(ctx, host, sid, reason)
		return
	}
	s := &g.sum
	if s.count == 0 {
		s.first, s.reasons, s.clients = now, map[string]int{}, map[string]int{}
		if !g.closed {
			g.timer = time.AfterFunc(g.window-now.Sub(g.started), func() { g.Flush(context.Background()) })
		}
	}
	s.count++
	s.reasons[reason]++
	if _, ok := s.clients[host]; ok || len(s.clients) < maxSummaryClients {
		s.clients[host]++
	}
	g.mu.Unlock()
}

// record writes one join.refused row.
func (g *JoinGuard) record(ctx context.Context, host, sid, reason string) {
	object := "client/" + host
	if sid != "" {
		object = "soul/" + sid
	}
	err := g.st.AuditRecord(context.WithoutCancel(ctx), store.AuditParams{
		Actor: store.Actor("anonymous"), Action: "join.refused", Object: object,
		Payload: map[string]any{"sid": sid, "reason": reason, "client": host, "count": 1},
	})
	if err != nil {
		g.log.Error("audit join.refused", "client", host, "err", err)
	}
	g.log.Warn("join refused", "client", host, "sid", sid, "reason", reason)
}

// Flush writes the summary of the refusals counted so far, if any.
func (g *JoinGuard) Flush(ctx context.Context) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.flushLocked(ctx)
}

// Close flushes the summary and stops its timer.
func (g *JoinGuard) Close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	g.flushLocked(context.Background())
}

func (g *JoinGuard) flushLocked(ctx context.Context) {
	if g.timer != nil {
		g.timer.Stop()
		g.timer = nil
	}
	s := g.sum
	if s.count == 0 {
		return
	}
	g.sum = refusalSummary{}
	clients := slices.Sorted(maps.Keys(s.clients))
	err := g.st.AuditRecord(context.WithoutCancel(ctx), store.AuditParams{
		Actor: store.Actor("anonymous"), Action: "join.refused", Object: "client/*",
		Payload: map[string]any{"count": s.count, "reasons": s.reasons, "clients": clients, "clients_listed_max": maxSummaryClients,
			"from": s.first.UTC().Format(time.RFC3339), "until": g.now().UTC().Format(time.RFC3339)},
	})
	if err != nil {
		g.log.Error("audit join.refused summary", "count", s.count, "err", err)
	}
	g.log.Warn("joins refused", "count", s.count, "clients", len(clients), "reasons", s.reasons)
}
