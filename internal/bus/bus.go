// Package bus is the keeper side of the agent transport: a NATS server
// embedded in the keeper (or an external NATS cluster), the auth callout
// that admits a soul by its client certificate from the keeper's CA and
// confines it to its own subjects, the souls' presence from their
// heartbeats, and Conn, which runs module commands on a soul through its
// agent (transport.Conn). The subjects and messages are internal/agent/wire.
package bus

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/soulstack/soulstack/internal/base"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/soulstack/soulstack/internal/agent/wire"
	"github.com/soulstack/soulstack/internal/pki"
	"github.com/soulstack/soulstack/internal/transport"
)

// Defaults.
const (
	// DefaultSessionTTL bounds a soul's NATS session: the server closes it
	// then and the agent reconnects through the callout, so an identity
	// revoked on an external cluster stops working within it.
	DefaultSessionTTL = 15 * time.Minute
	// DefaultMaxPayload is the embedded server's max_payload.
	DefaultMaxPayload = 8 << 20
	// keeperUser is the embedded server's user for the keeper itself.
	keeperUser = "soulstack-keeper"
)

// Config configures the bus. Listen selects the embedded server; URL an
// external cluster (then User/Password or CredsFile, IssuerSeed and,
// for TLS, the CA that signed the cluster's certificates).
type Config struct {
	// Listen is the embedded server's address (host:port, port 0 for any).
	Listen string
	// Advertise are the URLs given to souls (join); empty means
	// tls://<listen address>.
	Advertise []string
	// URL is an external cluster's comma-separated URLs.
	URL string
	// User and Password authenticate the keeper on an external cluster as
	// one of its auth_callout auth_users; CredsFile instead names a
	// credentials file.
	User, Password, CredsFile string
	// IssuerSeed is the seed of the account key the external cluster's
	// auth_callout names as issuer.
	IssuerSeed string
	// Account is where souls are placed on an external cluster (the
	// callout answer's audience); empty means the global account.
	Account string
	// ClusterCAs verify an external cluster's server certificates; nil
	// means the keeper's CA.
	ClusterCAs *x509.CertPool
	// KeeperCert is the client certificate the keeper presents to an
	// external cluster, whose tls block verifies every client (souls'
	// certificates are then checked by the server and again by the
	// callout); nil presents none.
	KeeperCert *tls.Certificate
	// CA is the keeper's CA: souls' certificates must chain to it, and the
	// embedded server's certificate is ServerCert.
	CA         *pki.CA
	ServerCert func(*tls.ClientHelloInfo) (*tls.Certificate, error)
	// Identities is the registry check of connecting souls.
	Identities Identities
	// Heartbeat is the interval agents are told to use; a soul is gone
	// after wire.MissedHeartbeats of them without one. 0 means
	// wire.DefaultHeartbeat.
	Heartbeat time.Duration
	// OnPresence, when set, is called (from one goroutine of the bus, in
	// order) when a soul's agent comes (present) or goes.
	OnPresence func(sid string, present bool)
	// SessionTTL: 0 means DefaultSessionTTL.
	SessionTTL time.Duration
	// Revalidate is how often every soul that had a session since start is
	// checked against Identities (one lookup each); 0 means every
	// Heartbeat. Revoke cuts a soul off at once in between.
	Revalidate time.Duration
	// CalloutWorkers is how many auth callout answers are computed at
	// once (0 means 32) and CalloutQueue how many requests may wait for
	// one (0 means 1024, under 2 s of admission here). A request beyond
	// both is refused at once as busy (Busy counts them): the agent
	// retries after its reconnect delay and jitter instead of holding a
	// socket until the server's auth timeout.
	CalloutWorkers, CalloutQueue int
	// MaxOutput is the per-stream output limit sent with each command; 0
	// means the SSH transport's default.
	MaxOutput int
	// Base is the bus's logger and clock.
	base.Base
}

// Server is a running bus.
type Server struct {
	cfg     Config
	log     *slog.Logger
	now     func() time.Time
	issuer  nkeys.KeyPair
	account string
	ns      *server.Server // nil with an external cluster
	nc      *nats.Conn
	urls    []string

	refused    atomic.Int64
	busy       atomic.Int64
	heartbeats atomic.Int64 // received, for Collector

	calloutQ  chan *nats.Msg
	calloutWG sync.WaitGroup
	events    chan presenceEvent
	delivered chan struct{}

	mu       sync.Mutex
	present  map[string]*presence
	sessions map[string]string    // sid -> serial of the last authorized session
	paused   map[string]time.Time // sid -> until when its connections are refused (flooding)

	stop chan struct{}
	done chan struct{}

	epochMu sync.Mutex
	epoch   chan struct{} // closed when the keeper's connection drops

	// warmUntil is the end of the start-up grace (WarmUntil).
	warmUntil time.Time

	// forgets are the spool entries to forget with each soul's next
	// durable command.
	forgets transport.ForgetQueue
}

// currentEpoch returns a channel closed when the keeper's own connection
// next drops: replies sent while it reconnects are lost, so the commands
// in flight then cannot know their outcome.
func (s *Server) currentEpoch() <-chan struct{} {
	s.epochMu.Lock()
	defer s.epochMu.Unlock()
	return s.epoch
}

func (s *Server) newEpoch() {
	s.epochMu.Lock()
	defer s.epochMu.Unlock()
	close(s.epoch)
	s.epoch = make(chan struct{})
}

type presence struct {
	last time.Time
	gone chan struct{} // closed when the soul is counted gone, or its agent restarted
	// instance is the agent process's (wire.Heartbeat.Instance).
	instance string
	// window starts the heartbeat interval whose heartbeats beats counts.
	window time.Time
	beats  int
}

// MaxHeartbeats is how many heartbeats a soul may send within one
// heartbeat interval (an agent sends one; a reconnect or a clock step
// adds one or two): past it the keeper cuts the soul off for FloodPause.
const MaxHeartbeats = 20

// heartbeatPendingMsgs is how many heartbeats may wait for the keeper's
// handler: a fleet of agents' worth.
const heartbeatPendingMsgs = 64 << 10

// FloodPause is how long a soul that sent more than the keeper allows is
// refused its connections after it is cut off.
const FloodPause = time.Minute

// Start starts the embedded server (or connects to the external cluster),
// answers the auth callout and tracks heartbeats until Close.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, account: cfg.Account, log: cfg.Log, now: cfg.Clock.Now, present: map[string]*presence{}, sessions: map[string]string{}, paused: map[string]time.Time{}, stop: make(chan struct{}), done: make(chan struct{}), events: make(chan presenceEvent, 4096), delivered: make(chan struct{})}
	s.warmUntil = s.now().Add(reconnectGrace(cfg.Heartbeat))
	s.calloutQ = make(chan *nats.Msg, cfg.CalloutQueue)
	if s.issuer, err = newIssuer(cfg.IssuerSeed); err != nil {
		return nil, fmt.Errorf("bus: %w", err)
	}
	s.epoch = make(chan struct{})
	url, opts, err := s.keeperConn()
	if err != nil {
		return nil, err
	}
	s.nc, err = nats.Connect(url, opts...)
	if err != nil {
		s.shutdown()
		return nil, fmt.Errorf("bus: connect the keeper to %s: %w", url, err)
	}
	for range cfg.CalloutWorkers {
		s.calloutWG.Add(1)
		go s.calloutWorker()
	}
	if err := s.subscribe(); err != nil {
		close(s.stop) // the callout workers
		s.shutdown()
		return nil, err
	}
	go s.watch()
	go s.deliver()
	s.log.Info("bus ready", "urls", s.urls, "embedded", s.ns != nil, "connected", s.nc.ConnectedUrlRedacted())
	return s, nil
}

// withDefaults checks cfg and fills its zero fields.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.CA == nil || cfg.Identities == nil {
		return cfg, errors.New("bus: a CA and an identity check are required")
	}
	if (cfg.Listen == "") == (cfg.URL == "") {
		return cfg, errors.New("bus: exactly one of an embedded listen address and an external URL is required")
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = wire.DefaultHeartbeat
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if cfg.Revalidate <= 0 {
		cfg.Revalidate = cfg.Heartbeat
	}
	if cfg.Account == "" {
		cfg.Account = server.DEFAULT_GLOBAL_ACCOUNT
	}
	if cfg.CalloutWorkers <= 0 {
		cfg.CalloutWorkers = defaultCalloutWorkers
	}
	if cfg.CalloutQueue <= 0 {
		cfg.CalloutQueue = defaultCalloutQueue
	}
	cfg.Init()
	return cfg, nil
}

// keeperConn starts the embedded server when the keeper runs one, and
// returns the URL and options of the keeper's own connection: as its own
// user to the embedded server, or with keeper.yml's credentials to the
// external cluster. It sets the URLs agents are given.
func (s *Server) keeperConn() (string, []nats.Option, error) {
	cfg := s.cfg
	pool := x509.NewCertPool()
	pool.AddCert(cfg.CA.Cert)
	opts := []nats.Option{nats.Name("soulstack keeper"), nats.MaxReconnects(-1), nats.ReconnectWait(500 * time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil { // nil: Close
				s.log.Warn("bus: the keeper's connection was lost; commands in flight end as disconnected", "err", err)
			}
			s.newEpoch()
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { s.log.Info("bus: the keeper reconnected", "url", c.ConnectedUrlRedacted()) }),
	}
	var url string
	if cfg.Listen != "" {
		password, err := s.startEmbedded(pool)
		if err != nil {
			return "", nil, err
		}
		host := selfHost(s.ns.Addr())
		url = "tls://" + net.JoinHostPort(host, strconv.Itoa(s.ns.Addr().(*net.TCPAddr).Port))
		opts = append(opts, nats.UserInfo(keeperUser, password), nats.Secure(&tls.Config{RootCAs: pool, ServerName: host, MinVersion: tls.VersionTLS12}))
	} else {
		url = cfg.URL
		roots := cfg.ClusterCAs
		if roots == nil {
			roots = pool
		}
		tc := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
		if cfg.KeeperCert != nil {
			tc.Certificates = []tls.Certificate{*cfg.KeeperCert}
		}
		opts = append(opts, nats.Secure(tc))
		switch {
		case cfg.CredsFile != "":
			opts = append(opts, nats.UserCredentials(cfg.CredsFile))
		case cfg.User != "":
			opts = append(opts, nats.UserInfo(cfg.User, cfg.Password))
		}
		s.urls = strings.Split(cfg.URL, ",")
	}
	if len(cfg.Advertise) > 0 {
		s.urls = cfg.Advertise
	}
	return url, opts, nil
}

// subscribe answers the auth callout (one queue group for all keepers)
// and takes the heartbeats.
func (s *Server) subscribe() error {
	if _, err := s.nc.QueueSubscribe(AuthCalloutSubject, "soulstack-keepers", s.callout); err != nil {
		return fmt.Errorf("bus: subscribe to the auth callout: %w", err)
	}
	hb, err := s.nc.Subscribe(wire.HeartbeatWildcard, s.heartbeat)
	if err == nil {
		// A flood waits in at most this much memory (the rest is
		// dropped) while heartbeat cuts its sender off.
		err = hb.SetPendingLimits(heartbeatPendingMsgs, heartbeatPendingMsgs*wire.MaxHeartbeatSize/16)
	}
	if err != nil {
		return fmt.Errorf("bus: subscribe to heartbeats: %w", err)
	}
	if err := s.nc.Flush(); err != nil {
		return fmt.Errorf("bus: %w", err)
	}
	return nil
}

// startEmbedded starts the embedded NATS server with TLS (the keeper's
// certificate; client certificates verified against its CA when given),
// the keeper's own user, and the auth callout for everyone else. It
// returns the keeper user's password, fresh for each start.
func (s *Server) startEmbedded(pool *x509.CertPool) (string, error) {
	host, portText, err := net.SplitHostPort(s.cfg.Listen)
	if err != nil {
		return "", fmt.Errorf("bus: listen %q: %w", s.cfg.Listen, err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return "", fmt.Errorf("bus: listen %q: port is not a number", s.cfg.Listen)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	var raw [24]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", fmt.Errorf("bus: keeper password: %w", err)
	}
	password := hex.EncodeToString(raw[:])
	pub, _ := s.issuer.PublicKey()
	tc := &tls.Config{
		GetCertificate: s.cfg.ServerCert,
		ClientAuth:     tls.VerifyClientCertIfGiven,
		ClientCAs:      pool,
		MinVersion:     tls.VersionTLS12,
	}
	opts := &server.Options{
		ServerName:  "soulstack-keeper",
		Host:        host,
		Port:        port,
		NoLog:       true,
		NoSigs:      true,
		TLSConfig:   tc,
		TLSTimeout:  10,
		AuthTimeout: 10,
		MaxPayload:  DefaultMaxPayload,
		Users:       []*server.User{{Username: keeperUser, Password: password}},
		AuthCallout: &server.AuthCallout{Issuer: pub, AuthUsers: []string{keeperUser}},
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return "", fmt.Errorf("bus: embedded NATS server: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return "", fmt.Errorf("bus: embedded NATS server on %s did not start", s.cfg.Listen)
	}
	s.ns = ns
	if len(s.cfg.Advertise) == 0 {
		s.urls = []string{"tls://" + ns.Addr().String()}
	}
	return password, nil
}

// selfHost is the address the keeper reaches its own embedded server on:
// the listen host, or loopback for an unspecified one (0.0.0.0, ::), which
// the server certificate covers either way.
func selfHost(a net.Addr) string {
	ta, ok := a.(*net.TCPAddr)
	switch {
	case !ok || ta.IP.IsUnspecified():
		return "127.0.0.1"
	default:
		return ta.IP.String()
	}
}

// AgentURLs are the URLs souls connect to (the join answer's nats.urls).
func (s *Server) AgentURLs() []string { return append([]string(nil), s.urls...) }

// Addr is the embedded server's listen address, nil with an external
// cluster.
func (s *Server) Addr() net.Addr {
	if s.ns == nil {
		return nil
	}
	return s.ns.Addr()
}

// Refused counts the souls the callout refused since Start.
func (s *Server) Refused() int64 { return s.refused.Load() }

// CalloutBacklog is how many auth callout requests wait for a worker.
func (s *Server) CalloutBacklog() int { return len(s.calloutQ) }

// Busy counts the connections the callout turned away because admission
// was saturated (CalloutWorkers busy and CalloutQueue full) since Start.
func (s *Server) Busy() int64 { return s.busy.Load() }

// Close stops tracking, closes the keeper's connection and shuts the
// embedded server down.
func (s *Server) Close() error {
	close(s.stop)
	<-s.done
	<-s.delivered
	s.calloutWG.Wait()
	s.shutdown()
	return nil
}

func (s *Server) shutdown() {
	if s.nc != nil {
		s.nc.Close()
	}
	if s.ns != nil {
		s.ns.Shutdown()
		s.ns.WaitForShutdown()
	}
}

func (s *Server) noteSession(sid, serial string) {
	s.mu.Lock()
	s.sessions[sid] = serial
	s.mu.Unlock()
}

// heartbeat marks the soul of the subject present. Only that soul may
// publish there (its permissions), so the subject is the proof.
func (s *Server) heartbeat(m *nats.Msg) {
	sid, err := wire.HeartbeatSID(m.Subject)
	if err != nil {
		return
	}
	s.heartbeats.Add(1)
	if len(m.Data) > wire.MaxHeartbeatSize {
		s.cutOff(sid, fmt.Sprintf("a %d-byte heartbeat (at most %d)", len(m.Data), wire.MaxHeartbeatSize))
		return
	}
	var hb wire.Heartbeat
	_ = json.Unmarshal(m.Data, &hb)
	now := s.now()
	s.mu.Lock()
	if until, paused := s.paused[sid]; paused && now.Before(until) {
		s.mu.Unlock()
		return // what it sent before it was cut off
	}
	p, ok := s.present[sid]
	restarted := ok && hb.Instance != "" && p.instance != "" && hb.Instance != p.instance
	if restarted {
		// Another agent process: the commands sent to the one before end
		// disconnected here (and are reattached through this one).
		close(p.gone)
		p.gone = make(chan struct{})
	}
	if ok {
		p.last = now
	} else {
		p = &presence{last: now, gone: make(chan struct{}), window: now}
		s.present[sid] = p
	}
	if hb.Instance != "" {
		p.instance = hb.Instance
	}
	if now.Sub(p.window) >= s.cfg.Heartbeat {
		p.window, p.beats = now, 0
	}
	p.beats++
	flood := p.beats > MaxHeartbeats
	s.mu.Unlock()
	if flood {
		s.cutOff(sid, fmt.Sprintf("more than %d heartbeats within %s", MaxHeartbeats, s.cfg.Heartbeat))
		return
	}
	if !ok {
		s.log.Info("bus: agent present", "sid", sid)
		s.notify(sid, true)
	}
	if restarted {
		s.log.Info("bus: agent restarted (a new instance's heartbeat): its commands in flight are reattached", "sid", sid)
	}
}

// notify queues a presence change for OnPresence, which deliver calls in
// order from its own goroutine: a slow registry never holds up the
// heartbeats.
func (s *Server) notify(sid string, present bool) {
	if s.cfg.OnPresence == nil {
		return
	}
	select {
	case s.events <- presenceEvent{sid, present}:
	case <-s.stop:
	}
}

type presenceEvent struct {
	sid     string
	present bool
}

func (s *Server) deliver() {
	defer close(s.delivered)
	for {
		select {
		case e := <-s.events:
			s.cfg.OnPresence(e.sid, e.present)
		case <-s.stop:
			return
		}
	}
}

// watch counts souls gone after missed heartbeats and closes the sessions
// of souls whose identity the registry no longer accepts.
func (s *Server) watch() {
	defer close(s.done)
	t := time.NewTicker(s.cfg.Heartbeat)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		s.expire()
		if time.Since(last) >= s.cfg.Revalidate {
			s.revalidate()
			last = time.Now()
		}
	}
}

// expire forgets the souls without a heartbeat for MissedHeartbeats
// intervals.
func (s *Server) expire() {
	limit := s.now().Add(-time.Duration(wire.MissedHeartbeats) * s.cfg.Heartbeat)
	var gone []string
	s.mu.Lock()
	for sid, p := range s.present {
		if p.last.Before(limit) {
			close(p.gone)
			delete(s.present, sid)
			gone = append(gone, sid)
		}
	}
	s.mu.Unlock()
	for _, sid := range gone {
		s.log.Info("bus: agent gone (heartbeats stopped)", "sid", sid)
		s.notify(sid, false)
	}
}

// revalidate checks the registry for every soul with a session: one that
// is destroyed, unknown or whose certificate was replaced is disconnected
// (Revoke).
func (s *Server) revalidate() {
	s.mu.Lock()
	sessions := make(map[string]string, len(s.sessions))
	for sid, serial := range s.sessions {
		sessions[sid] = serial
	}
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Revalidate)
	defer cancel()
	for sid, serial := range sessions {
		want, ok, err := s.cfg.Identities.SoulCert(ctx, sid)
		if err != nil {
			continue // the next round tries again
		}
		if !ok || want != serial {
			s.revoke(sid, serial, "sweep")
		}
	}
}

// Recheck asks the registry at once about souls sids, those of them with
// a session: one that is destroyed, unknown or whose certificate was
// replaced is disconnected now, as the sweep would later. The keeper calls
// it after it deleted or destroyed souls or renewed a certificate; a soul
// whose identity still holds keeps its session. A failed lookup leaves the
// soul to the sweep. It returns the souls revoked.
func (s *Server) Recheck(ctx context.Context, sids ...string) []string {
	var revoked []string
	for _, sid := range sids {
		s.mu.Lock()
		serial, ok := s.sessions[sid]
		s.mu.Unlock()
		if !ok {
			continue
		}
		want, valid, err := s.cfg.Identities.SoulCert(ctx, sid)
		if err != nil {
			s.log.Warn("bus: recheck a soul's identity (the sweep will)", "sid", sid, "err", err)
			continue
		}
		if !valid || want != serial {
			s.revoke(sid, serial, "registry change")
			revoked = append(revoked, sid)
		}
	}
	return revoked
}

// Revoke closes the sessions of soul sid now and forgets its presence: the
// keeper calls it when it destroys a soul or replaces its certificate
// (revalidation catches it within a heartbeat interval otherwise). Its
// reconnection goes through the callout, which refuses it. With an
// external cluster the session ends at the latest when its user JWT
// expires (SessionTTL).
func (s *Server) Revoke(sid string) {
	s.mu.Lock()
	serial := s.sessions[sid]
	s.mu.Unlock()
	s.revoke(sid, serial, "revoked")
}

// revoke closes soul sid's sessions of certificate serial; why ("sweep",
// "registry change", "revoked") is logged.
func (s *Server) revoke(sid, serial, why string) {
	s.mu.Lock()
	if s.sessions[sid] == serial {
		delete(s.sessions, sid)
	}
	p, wasPresent := s.present[sid]
	if wasPresent {
		close(p.gone)
		delete(s.present, sid)
	}
	s.mu.Unlock()
	kicked := s.kick(sid, serial)
	s.log.Info("bus: soul identity revoked", "sid", sid, "serial", serial, "by", why, "connections_closed", kicked)
	if wasPresent {
		s.notify(sid, false)
	}
}

// cutOff closes soul sid's sessions and refuses its connections for
// FloodPause: it sent more than any agent does (why).
func (s *Server) cutOff(sid, why string) {
	s.mu.Lock()
	s.paused[sid] = s.now().Add(FloodPause)
	serial := s.sessions[sid]
	s.mu.Unlock()
	s.log.Warn("bus: soul cut off for flooding", "sid", sid, "why", why, "for", FloodPause)
	s.revoke(sid, serial, "flood")
}

// pausedUntil is until when soul sid's connections are refused, if they
// are.
func (s *Server) pausedUntil(sid string, now time.Time) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	until, ok := s.paused[sid]
	if ok && !now.Before(until) {
		delete(s.paused, sid)
		return time.Time{}, false
	}
	return until, ok
}

// kick closes the embedded server's connections of soul sid: those of
// certificate serial, or all of the soul's when serial is empty.
func (s *Server) kick(sid, serial string) int {
	if s.ns == nil {
		return 0
	}
	cz, err := s.ns.Connz(&server.ConnzOptions{Username: true, Limit: 1 << 30})
	if err != nil {
		return 0
	}
	prefix := userName(sid, serial)
	if serial == "" {
		prefix = "soul:" + sid + ":"
	}
	n := 0
	for _, c := range cz.Conns {
		if c.AuthorizedUser == prefix || serial == "" && strings.HasPrefix(c.AuthorizedUser, prefix) {
			if s.ns.DisconnectClientByID(c.Cid) == nil {
				n++
			}
		}
	}
	return n
}

// Present reports whether soul sid's agent is connected.
func (s *Server) Present(sid string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.present[sid]
	return ok
}

// Agent returns a Conn to sid's agent when it is present
// (transport.Agents).
func (s *Server) Agent(sid string) (transport.Conn, bool) {
	s.mu.Lock()
	p, ok := s.present[sid]
	s.mu.Unlock()
	if !ok {
		return nil, false
	}
	return &Conn{s: s, sid: sid, gone: p.gone}, true
}

var _ transport.Agents = (*Server)(nil)

// reconnectGrace is how long after a bus starts its agents are expected to
// have reconnected: they reconnect within their reconnect wait (1 s) plus
// jitter (up to a heartbeat) and are present at their first heartbeat, so
// three heartbeats and two seconds.
func reconnectGrace(heartbeat time.Duration) time.Duration { return 3*heartbeat + 2*time.Second }

// WarmUntil is when the bus's start-up grace ends: until then a soul with
// an agent identity whose agent is not connected yet is waited for (its
// agent reconnects within a few heartbeats of the keeper's restart)
// rather than reached over SSH.
func (s *Server) WarmUntil() time.Time { return s.warmUntil }
