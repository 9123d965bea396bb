package keeper

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"sync"

	"github.com/soulstack/soulstack/internal/base"

	"github.com/soulstack/soulstack/internal/config"
	"github.com/soulstack/soulstack/internal/pki"
)

// This file is the keeper's network edge: whether the API listener speaks
// HTTPS and with which certificate, and the cap on connections per client
// address.

// serverTLS returns the API listener's TLS configuration, or nil for plain
// HTTP (loopback without tls config, or --insecure-plaintext). It logs
// which of the three it chose.
func serverTLS(c config.Config, b base.Base) (*tls.Config, error) {
	log, clock := b.Log, b.Clock
	now := clock.Now()
	switch {
	case c.TLS.CertFile != "":
		cert, err := tls.LoadX509KeyPair(c.TLS.CertFile, c.TLS.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls: load cert_file %s and key_file %s: %w", c.TLS.CertFile, c.TLS.KeyFile, err)
		}
		log.Info("TLS with the configured certificate", "cert_file", c.TLS.CertFile)
		return tlsConfig(cert), nil
	case c.ServesTLS():
		ca, err := pki.LoadOrCreateCA(c.TLSDir(), now)
		if err != nil {
			return nil, fmt.Errorf("tls: keeper CA in %s: %w", c.TLSDir(), err)
		}
		extra := append([]string(nil), c.TLS.Hosts...)
		if u, err := url.Parse(c.KeeperURL); err == nil && u.Hostname() != "" {
			extra = append(extra, u.Hostname())
		}
		hosts, err := pki.ListenHosts(c.Listen, extra...)
		if err != nil {
			return nil, fmt.Errorf("tls: %w", err)
		}
		cert, issued, err := ca.EnsureServer(c.TLSDir(), hosts, now)
		if err != nil {
			return nil, fmt.Errorf("tls: server certificate in %s: %w", c.TLSDir(), err)
		}
		state := map[pki.Issued]string{pki.Reused: "reused", pki.Created: "created", pki.Renewed: "renewed"}[issued]
		log.Info("TLS with the keeper's own CA: give clients its certificate (--ca-file) or pin its fingerprint (--ca-fingerprint)",
			"ca_file", c.TLSDir()+"/"+pki.CACertFile, "ca_fingerprint", ca.Fingerprint(),
			"server_cert", state, "dns_names", hosts.DNSNames, "ips", fmt.Sprint(hosts.IPs))
		cfg := tlsConfig(cert)
		cfg.Certificates = nil
		cfg.GetCertificate = ca.NewServerSource(c.TLSDir(), hosts, cert, clock.Now).GetCertificate
		return cfg, nil
	case !c.LoopbackListen():
		log.Warn("serving plain HTTP on a non-loopback address (--insecure-plaintext): API tokens travel in clear", "listen", c.Listen)
	}
	return nil, nil
}

func tlsConfig(cert tls.Certificate) *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"h2", "http/1.1"},
	}
}

// connLimiter is a net.Listener that closes, at once, a connection whose
// client address already holds max open connections.
type connLimiter struct {
	net.Listener
	max int
	log *slog.Logger

	mu     sync.Mutex
	open   map[string]int
	warned map[string]bool
}

func limitConns(ln net.Listener, max int, log *slog.Logger) *connLimiter {
	return &connLimiter{Listener: ln, max: max, log: log, open: map[string]int{}, warned: map[string]bool{}}
}

// Accept returns the next connection within the cap.
func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		conn, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		host := clientHost(conn.RemoteAddr())
		l.mu.Lock()
		over := l.open[host] >= l.max
		first := over && !l.warned[host]
		if over {
			l.warned[host] = true
		} else {
			l.open[host]++
		}
		l.mu.Unlock()
		if !over {
			return &limitedConn{Conn: conn, release: func() { l.release(host) }}, nil
		}
		if first {
			l.log.Warn("client address over its connection cap; closing its new connections", "client", host, "max_conns_per_client", l.max)
		}
		_ = conn.Close()
	}
}

func (l *connLimiter) release(host string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open[host]--
	if l.open[host] <= 0 {
		delete(l.open, host)
		delete(l.warned, host)
	}
}

func clientHost(a net.Addr) string {
	if host, _, err := net.SplitHostPort(a.String()); err == nil {
		return host
	}
	return a.String()
}

// limitedConn gives its place back once, when closed.
type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
