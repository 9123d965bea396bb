package keeper

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/soulstack/soulstack/internal/base"

	"github.com/soulstack/soulstack/internal/bus"
	"github.com/soulstack/soulstack/internal/config"
	"github.com/soulstack/soulstack/internal/pki"
	"github.com/soulstack/soulstack/internal/secret"
	"github.com/soulstack/soulstack/internal/store"
)

// soulIdentities is the bus's registry check (bus.Identities): the soul
// exists, is not destroyed, and holds a certificate — the serial its join
// (or last renewal) stored, cleared when it is destroyed.
type soulIdentities struct {
	souls interface {
		SoulGet(ctx context.Context, sid string) (store.Soul, error)
	}
}

func (i soulIdentities) SoulCert(ctx context.Context, sid string) (string, bool, error) {
	so, err := i.souls.SoulGet(ctx, sid)
	if errors.Is(err, store.ErrNotFound) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	if so.Status == store.SoulDestroyed || so.CertSerial == "" {
		return "", false, nil
	}
	return so.CertSerial, true, nil
}

// busRegistry is what the bus reads and writes of the registry.
type busRegistry interface {
	SoulGet(ctx context.Context, sid string) (store.Soul, error)
	soulContacts
}

// soulContacts is what presence changes are recorded with.
type soulContacts interface {
	SoulContact(ctx context.Context, p store.SoulContactParams) ([]store.SoulTransition, error)
}

// recordPresence makes a soul active when its agent comes (soul.activated)
// and unreachable when its heartbeats stop (soul.unreachable, code
// agent.heartbeat_lost).
func recordPresence(st soulContacts, log *slog.Logger) func(sid string, present bool) {
	return func(sid string, present bool) {
		p := store.SoulContactParams{Actor: store.ActorKeeper}
		if present {
			p.Reached = []string{sid}
		} else {
			p.Unreachable = []store.UnreachableSoul{{SID: sid, Code: "agent.heartbeat_lost", Error: "the soul's agent stopped sending heartbeats"}}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := st.SoulContact(ctx, p); err != nil && !errors.Is(err, store.ErrNotFound) {
			log.Warn("record an agent's presence", "sid", sid, "present", present, "err", err)
		}
	}
}

// startBus starts the agent transport's bus (config nats:): the embedded
// NATS server with TLS from the keeper's CA, or the keeper's connection
// to an external cluster as its auth callout responder. It returns nil
// when the bus is disabled.
func startBus(ctx context.Context, c config.Config, st busRegistry, resolver *secret.Resolver, secrets *secret.Keeper, b base.Base) (*bus.Server, error) {
	log := b.Log
	n := c.NATS
	if !n.On() {
		return nil, nil
	}
	now := b.Now()
	ca, err := pki.LoadOrCreateCA(c.TLSDir(), now)
	if err != nil {
		return nil, fmt.Errorf("nats: keeper CA in %s: %w", c.TLSDir(), err)
	}
	cfg := bus.Config{
		CA: ca, Identities: soulIdentities{souls: st}, OnPresence: recordPresence(st, log), Base: b.Named("bus"),
		Heartbeat: n.Heartbeat.Std(), SessionTTL: n.SessionTTL.Std(),
		// Six heartbeats (30 s by default): one registry lookup per soul
		// each time; the keeper that deletes, destroys or renews a soul
		// rechecks it at once (revokeOnChange).
		Revalidate: 6 * n.Heartbeat.Std(),
		Advertise:  n.Advertise,
	}
	if n.External() {
		if err := externalBus(ctx, c, resolver, secrets, now, &cfg); err != nil {
			return nil, err
		}
	} else {
		cfg.Listen = n.Listen
		extra := append([]string(nil), c.TLS.Hosts...)
		for _, a := range n.Advertise {
			if u, err := url.Parse(a); err == nil && u.Hostname() != "" {
				extra = append(extra, u.Hostname())
			}
		}
		hosts, err := pki.ListenHosts(n.Listen, extra...)
		if err != nil {
			return nil, fmt.Errorf("nats: %w", err)
		}
		dir := filepath.Join(c.TLSDir(), "nats")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("nats: %w", err)
		}
		cert, _, err := ca.EnsureServer(dir, hosts, now)
		if err != nil {
			return nil, fmt.Errorf("nats: server certificate in %s: %w", dir, err)
		}
		cfg.ServerCert = ca.NewServerSource(dir, hosts, cert, b.Clock.Now).GetCertificate
	}
	srv, err := bus.Start(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("nats: %w", err)
	}
	return srv, nil
}

// externalBus fills cfg for an external cluster: the keeper's credentials
// and the callout issuer's seed, resolved from their references.
func externalBus(ctx context.Context, c config.Config, resolver *secret.Resolver, secrets *secret.Keeper, now time.Time, cfg *bus.Config) error {
	n := c.NATS
	seed, err := resolver.Resolve(ctx, n.IssuerSeedRef)
	if err != nil {
		return fmt.Errorf("nats.issuer_seed_ref: %w", err)
	}
	secrets.Register(strings.TrimSpace(seed))
	cfg.URL, cfg.IssuerSeed, cfg.Account = n.URL, strings.TrimSpace(seed), n.Account
	cfg.User, cfg.CredsFile = n.User, n.CredsFile
	if n.User != "" {
		pw, err := resolver.Resolve(ctx, n.PasswordRef)
		if err != nil {
			return fmt.Errorf("nats.password_ref: %w", err)
		}
		secrets.Register(strings.TrimSpace(pw))
		cfg.Password = strings.TrimSpace(pw)
	}
	cert, err := keeperClientCert(cfg.CA, now)
	if err != nil {
		return fmt.Errorf("nats: %w", err)
	}
	cfg.KeeperCert = cert
	if n.CAFile != "" {
		b, err := os.ReadFile(n.CAFile)
		if err != nil {
			return fmt.Errorf("nats.ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return fmt.Errorf("nats.ca_file: %s holds no PEM certificate", n.CAFile)
		}
		cfg.ClusterCAs = pool
	}
	return nil
}

// busPort is the embedded bus's port for the local driver's host ports,
// "" when there is none.
func busPort(b *bus.Server) string {
	if b == nil || b.Addr() == nil {
		return ""
	}
	_, port, _ := net.SplitHostPort(b.Addr().String())
	return port
}

// keeperClientCert issues the keeper, in memory, a client certificate
// from its CA for an external cluster that verifies every client. It names
// no registered soul, so the callout would refuse it as a soul; the keeper
// authenticates as the cluster's auth user.
func keeperClientCert(ca *pki.CA, now time.Time) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	if err != nil {
		return nil, err
	}
	csr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		return nil, err
	}
	cc, err := ca.IssueClient(csr, "keeper.soulstack.invalid", 0, now)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{cc.Cert.Raw}, PrivateKey: key, Leaf: cc.Cert}, nil
}
