package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// NATSPortOffset is the embedded bus's port relative to the API's: the
// API on 8420, the agent listener on 8421, the bus on 8422 (an API on
// port 0 gets a bus on port 0 too).
const NATSPortOffset = 2

// NATS configures the agent transport's message bus: a NATS server
// embedded in the keeper (the default), or an external NATS cluster (URL)
// that the keeper serves as auth callout responder. Souls connect with TLS
// and their client certificate from the keeper's CA.
type NATS struct {
	// Enabled runs the bus (default true).
	Enabled *bool `yaml:"enabled"`
	// Listen is the embedded server's host:port; default the agent
	// listener's host (all addresses unless agent_listen says otherwise;
	// the API's host when it is off) with the API's port + 2 (0 when the
	// API's port is 0). VMs of the local driver reach it there; the keeper
	// adds its port to the driver's host ports.
	Listen string `yaml:"listen"`
	// Advertise are the URLs given to souls at join (tls://host:port);
	// default: for local VMs tls://soulstack-local-gateway:<port>, else
	// tls://<keeper_url's host or listen's host>:<port>, or the cluster's
	// URLs.
	Advertise []string `yaml:"advertise"`
	// Heartbeat is the agents' heartbeat interval (default 5s); a soul is
	// unreachable after three missed.
	Heartbeat Duration `yaml:"heartbeat"`
	// SessionTTL bounds one NATS session of a soul before it
	// re-authenticates (default 15m).
	SessionTTL Duration `yaml:"session_ttl"`

	// URL selects an external cluster: comma-separated nats:// or tls://
	// URLs. The cluster's auth_callout must name IssuerSeedRef's public
	// key as issuer and User (or the user of CredsFile) as an auth user.
	URL string `yaml:"url"`
	// User and PasswordRef (env:, file: or vault:) authenticate the keeper
	// to the cluster; CredsFile instead names a NATS credentials file.
	User        string `yaml:"user"`
	PasswordRef string `yaml:"password_ref"`
	CredsFile   string `yaml:"creds_file"`
	// IssuerSeedRef names the account seed (SA…) that signs the callout's
	// answers.
	IssuerSeedRef string `yaml:"issuer_seed_ref"`
	// Account is the cluster account souls are placed in; empty means the
	// global account.
	Account string `yaml:"account"`
	// CAFile verifies the cluster's server certificates; empty means the
	// keeper's CA.
	CAFile string `yaml:"ca_file"`
}

// On reports whether the bus runs.
func (n NATS) On() bool { return n.Enabled == nil || *n.Enabled }

// External reports whether the bus is an external cluster.
func (n NATS) External() bool { return n.URL != "" }

func (n NATS) withDefaults(apiListen, agentListen string) NATS {
	if n.Enabled == nil {
		on := true
		n.Enabled = &on
	}
	if n.Listen == "" && n.URL == "" {
		host, port, err := net.SplitHostPort(apiListen)
		if err == nil {
			if agentListen != AgentListenOff {
				if h, _, err := net.SplitHostPort(agentListen); err == nil {
					host = h
				}
			}
			p := "0"
			if n, err := strconv.Atoi(port); err == nil && n != 0 && n+NATSPortOffset <= 65535 {
				p = strconv.Itoa(n + NATSPortOffset)
			}
			n.Listen = net.JoinHostPort(host, p)
		}
	}
	orDefault(&n.Heartbeat, 5*time.Second)
	orDefault(&n.SessionTTL, 15*time.Minute)
	return n
}

func (n NATS) validate() error {
	if !n.On() {
		return nil
	}
	if err := positive("nats.heartbeat", n.Heartbeat, 0, "5s"); err != nil {
		return err
	}
	if err := positive("nats.session_ttl", n.SessionTTL, 0, "15m"); err != nil {
		return err
	}
	for i, a := range n.Advertise {
		if err := natsURL(a); err != nil {
			return fmt.Errorf("nats.advertise[%d]: %w", i, err)
		}
	}
	if !n.External() {
		if _, _, err := net.SplitHostPort(n.Listen); err != nil {
			return fmt.Errorf("nats.listen: %q is not host:port: %w", n.Listen, err)
		}
		for _, k := range []struct{ name, v string }{{"user", n.User}, {"password_ref", n.PasswordRef}, {"creds_file", n.CredsFile}, {"issuer_seed_ref", n.IssuerSeedRef}, {"account", n.Account}, {"ca_file", n.CAFile}} {
			if k.v != "" {
				return fmt.Errorf("nats.%s: only applies to an external cluster (nats.url)", k.name)
			}
		}
		return nil
	}
	if n.Listen != "" {
		return errors.New("nats.listen: contradicts nats.url (an external cluster); drop one of them")
	}
	for i, u := range strings.Split(n.URL, ",") {
		if err := natsURL(strings.TrimSpace(u)); err != nil {
			return fmt.Errorf("nats.url: URL %d: %w", i+1, err)
		}
	}
	if n.IssuerSeedRef == "" {
		return errors.New("nats.issuer_seed_ref: an external cluster needs the seed of its auth_callout issuer account (env:, file: or vault:)")
	}
	if !isRef(n.IssuerSeedRef) {
		return errors.New("nats.issuer_seed_ref: want env:NAME, file:/path or vault:<path>#<field>")
	}
	switch {
	case n.CredsFile != "" && (n.User != "" || n.PasswordRef != ""):
		return errors.New("nats.creds_file: contradicts nats.user/password_ref; use one of them")
	case n.CredsFile == "" && n.User == "":
		return errors.New("nats.user: an external cluster needs the keeper's auth user (user and password_ref, or creds_file)")
	case n.User != "" && !isRef(n.PasswordRef):
		return errors.New("nats.password_ref: want env:NAME, file:/path or vault:<path>#<field> for nats.user's password")
	}
	return nil
}

func isRef(s string) bool {
	return strings.HasPrefix(s, "env:") || strings.HasPrefix(s, "file:") || strings.HasPrefix(s, "vault:")
}

func natsURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("%q is not a URL", s)
	}
	if u.Scheme != "tls" && u.Scheme != "nats" {
		return fmt.Errorf("%q: want tls://host:port or nats://host:port", s)
	}
	if _, _, err := net.SplitHostPort(u.Host); err != nil {
		return fmt.Errorf("%q: want tls://host:port or nats://host:port", s)
	}
	return nil
}
