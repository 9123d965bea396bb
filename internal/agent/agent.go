// Package agent is the soul side of the agent transport: Serve keeps one
// outbound NATS connection to the keeper's bus, authenticated by the
// soul's client certificate, sends heartbeats, and runs the module
// commands the keeper sends (Run) with the same semantics as the SSH
// transport. It imports no server or database package: the soul binary
// links it.
package agent

import (
	"context"
	crand "crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/soulstack/soulstack/internal/agent/wire"
	"github.com/soulstack/soulstack/internal/tracing"
)

// Config configures Serve.
type Config struct {
	// SID is the soul's id, the one its certificate names.
	SID string
	// URLs are the bus's NATS URLs (tls://host:port), as the join answer
	// gives them.
	URLs []string
	// TLS carries the soul's identity: GetClientCertificate returning its
	// current certificate (so that a renewed one is used on the next
	// reconnect) and RootCAs holding the keeper's CA.
	TLS *tls.Config
	// Logger receives the agent's log; nil discards it.
	Logger *slog.Logger
	// Heartbeat is the interval between heartbeats; 0 means
	// wire.DefaultHeartbeat.
	Heartbeat time.Duration
	// Version is reported in heartbeats.
	Version string
	// ReconnectWait is the pause between reconnection attempts; 0 means 1s.
	ReconnectWait time.Duration
	// Jitter bounds the random delay the agent waits before its first
	// connection and adds to ReconnectWait before each reconnection, so
	// that a fleet started (or cut off) at once arrives spread out rather
	// than all in the same second: 0 means the heartbeat interval, a
	// negative value none.
	Jitter time.Duration
	// Exec runs one command; nil means Run. Benchmarks of the bus itself
	// set one that spawns nothing.
	Exec func(ctx context.Context, req wire.ExecRequest) Outcome
	// Spool is the directory where durable commands' results are kept
	// (the soul's state dir/spool); empty: an agent that runs durable
	// commands as plain ones, without spool or fencing (tests of the bus).
	Spool string
	// Metrics counts the agent's commands and connection; nil: none.
	Metrics *Metrics
}

// spoolSweepEvery is how often the agent removes expired spool entries.
const spoolSweepEvery = time.Hour

// ErrConfig means Config is incomplete.
var ErrConfig = errors.New("agent: invalid config")

// Serve runs the agent until ctx ends: it connects (retrying while the bus
// cannot be reached or refuses it), subscribes to the soul's command
// subjects, sends heartbeats, and runs each command in its own goroutine.
// Commands still running when ctx ends are killed. It returns nil when ctx
// ends, an error when the config is invalid.
func Serve(ctx context.Context, cfg Config) error {
	if err := cfg.check(); err != nil {
		return err
	}
	cfg = cfg.withDefaults()
	if cfg.Jitter > 0 {
		select {
		case <-time.After(rand.N(cfg.Jitter)):
		case <-ctx.Done():
			return nil
		}
	}
	runCtx, stopRuns := context.WithCancel(ctx)
	defer stopRuns()
	e, err := newExecutor(runCtx, cfg.Logger, cfg.Exec, cfg.Spool)
	if err != nil {
		return err
	}
	e.metrics = cfg.Metrics
	a := &agent{executor: e, sid: cfg.SID}
	nc, err := connect(cfg)
	if err != nil {
		return fmt.Errorf("agent: connect to the bus: %w", err)
	}
	defer nc.Close()
	a.nc = nc
	if _, err := nc.Subscribe(wire.ExecSubject(cfg.SID), a.exec); err != nil {
		return fmt.Errorf("agent: subscribe: %w", err)
	}
	if _, err := nc.Subscribe(wire.CancelSubject(cfg.SID), a.cancel); err != nil {
		return fmt.Errorf("agent: subscribe: %w", err)
	}
	a.beat(ctx, cfg)
	stopRuns()
	a.wg.Wait()
	return nil
}

// check refuses an incomplete config.
func (cfg Config) check() error {
	switch {
	case cfg.SID == "":
		return fmt.Errorf("%w: no SID", ErrConfig)
	case len(cfg.URLs) == 0:
		return fmt.Errorf("%w: no NATS URLs", ErrConfig)
	case cfg.TLS == nil:
		return fmt.Errorf("%w: no TLS config (the soul's certificate and the keeper's CA)", ErrConfig)
	}
	return nil
}

// withDefaults fills the zero fields: no logging, the default heartbeat,
// 1 s between reconnects, a jitter of one heartbeat (none when negative).
// A nil Exec stays nil: the executor runs Run, durable commands under
// supervisors.
func (cfg Config) withDefaults() Config {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = wire.DefaultHeartbeat
	}
	if cfg.ReconnectWait <= 0 {
		cfg.ReconnectWait = time.Second
	}
	switch {
	case cfg.Jitter == 0:
		cfg.Jitter = cfg.Heartbeat
	case cfg.Jitter < 0:
		cfg.Jitter = 0
	}
	return cfg
}

// connect connects to the bus as the soul, retrying for ever (a refusal
// too: it may be the keeper's admission being saturated).
func connect(cfg Config) (*nats.Conn, error) {
	log, wait, jitter := cfg.Logger, cfg.ReconnectWait, cfg.Jitter
	return nats.Connect(strings.Join(cfg.URLs, ","),
		nats.Secure(cfg.TLS),
		nats.Name("soul "+cfg.SID),
		// Generous: after a keeper restart every soul reconnects at once,
		// and a handshake cut short only adds to the storm.
		nats.Timeout(15*time.Second),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(wait),
		nats.ReconnectJitter(max(jitter, wait/4), max(jitter, wait/4)),
		// A refusal may be the keeper's admission being saturated (or its
		// registry briefly down): keep retrying, as for any other failure,
		// rather than give up after two refusals in a row.
		nats.IgnoreAuthErrorAbort(),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			cfg.Metrics.setConnected(false)
			log.Warn("bus connection lost", "err", err)
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			cfg.Metrics.setConnected(true)
			cfg.Metrics.reconnected()
			log.Info("bus connection back", "url", c.ConnectedUrlRedacted())
		}),
		nats.ConnectHandler(func(c *nats.Conn) {
			cfg.Metrics.setConnected(true)
			log.Info("connected to the bus", "url", c.ConnectedUrlRedacted())
		}),
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
			log.Warn("bus connection attempt failed", "err", err)
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			log.Warn("bus error", "err", err)
		}),
	)
}

// beat sends the soul's heartbeat every cfg.Heartbeat while connected,
// and sweeps the spool every hour, until ctx ends.
func (a *agent) beat(ctx context.Context, cfg Config) {
	var inst [8]byte
	_, _ = crand.Read(inst[:])
	hb, _ := json.Marshal(wire.Heartbeat{SID: cfg.SID, IntervalMS: cfg.Heartbeat.Milliseconds(), Version: cfg.Version, Instance: hex.EncodeToString(inst[:])})
	send := func() {
		if a.nc.IsConnected() {
			if err := a.nc.Publish(wire.HeartbeatSubject(cfg.SID), hb); err != nil {
				a.log.Warn("heartbeat", "err", err)
			}
		}
	}
	ticker := time.NewTicker(cfg.Heartbeat)
	defer ticker.Stop()
	sweep := time.NewTicker(spoolSweepEvery)
	defer sweep.Stop()
	send()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			send()
		case <-sweep.C:
			if a.spool != nil {
				a.spool.sweep(time.Now())
			}
		}
	}
}

type agent struct {
	*executor
	sid string
	nc  *nats.Conn
}

// exec decodes one command and runs it (executor.exec), its output parts
// and end sent to the command's reply subject. A request without a usable
// id is ignored.
func (a *agent) exec(m *nats.Msg) {
	var req wire.ExecRequest
	if err := json.Unmarshal(m.Data, &req); err != nil || !wire.ValidID(req.ID) {
		a.log.Warn("ignored an undecodable command", "err", err)
		return
	}
	replyTo := wire.ReplySubject(a.sid, req.ID)
	// The keeper's trace continues here (exported when the agent's
	// tracing is on): one span per command, its outcome only.
	_, span := tracing.Tracer().Start(tracing.Extract(a.ctx, m.Header.Get(wire.TraceHeader)), "agent.command",
		trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(tracing.SID.String(a.sid), attribute.Bool("soulstack.command.durable", req.Durable != nil)))
	a.executor.exec(req, func(o Outcome) { a.reply(replyTo, o.Stdout, o.Stderr, o.ExecEnd) }, span)
}

func (a *agent) cancel(m *nats.Msg) {
	var req wire.CancelRequest
	if json.Unmarshal(m.Data, &req) != nil {
		return
	}
	a.executor.cancel(req)
}

// reply sends stdout and stderr in parts of at most wire.ChunkSize bytes,
// then the end.
func (a *agent) reply(subject string, stdout, stderr []byte, end wire.ExecEnd) {
	send := func(part string, data []byte) {
		msg := nats.NewMsg(subject)
		msg.Header.Set(wire.PartHeader, part)
		msg.Data = data
		if err := a.nc.PublishMsg(msg); err != nil {
			a.log.Warn("send command output", "err", err)
		}
	}
	for _, s := range []struct {
		part string
		data []byte
	}{{wire.PartStdout, stdout}, {wire.PartStderr, stderr}} {
		for d := s.data; len(d) > 0; {
			n := min(len(d), wire.ChunkSize)
			send(s.part, d[:n])
			d = d[n:]
		}
	}
	b, _ := json.Marshal(end)
	send(wire.PartEnd, b)
	if err := a.nc.Flush(); err != nil {
		a.log.Warn("flush command output", "err", err)
	}
}
