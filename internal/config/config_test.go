package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/config"
)

// TestTLSMode: which listen addresses and tls settings give HTTPS, plain
// HTTP or a refusal, and the URL new VMs are given.
func TestTLSMode(t *testing.T) {
	t.Parallel()
	off := false
	for _, tc := range []struct {
		name    string
		c       config.Config
		tls     bool
		url     string
		invalid string
	}{
		{name: "loopback default", c: config.Config{}, tls: false, url: "http://127.0.0.1:8420"},
		{name: "localhost", c: config.Config{Listen: "localhost:1"}, tls: false},
		{name: "ipv6 loopback", c: config.Config{Listen: "[::1]:1"}, tls: false},
		{name: "all interfaces", c: config.Config{Listen: "0.0.0.0:8420"}, tls: true, url: "https://0.0.0.0:8420"},
		{name: "empty host", c: config.Config{Listen: ":8420"}, tls: true},
		{name: "a name", c: config.Config{Listen: "keeper.example.com:8420"}, tls: true},
		{name: "cert files on loopback", c: config.Config{TLS: config.TLS{CertFile: "c", KeyFile: "k"}}, tls: true, url: "https://127.0.0.1:8420"},
		{name: "insecure plaintext", c: config.Config{Listen: "10.0.0.1:1", InsecurePlaintext: true}, tls: false},
		{name: "no auto CA", c: config.Config{Listen: "10.0.0.1:1", TLS: config.TLS{AutoCA: &off}}, invalid: "--insecure-plaintext"},
		{name: "no auto CA on loopback", c: config.Config{TLS: config.TLS{AutoCA: &off}}, tls: false},
		{name: "cert without key", c: config.Config{TLS: config.TLS{CertFile: "c"}}, invalid: "tls: set both"},
		{name: "cert and insecure", c: config.Config{TLS: config.TLS{CertFile: "c", KeyFile: "k"}, InsecurePlaintext: true}, invalid: "insecure_plaintext"},
		{name: "bad timeout", c: config.Config{HTTP: config.HTTP{ReadTimeout: config.Duration(-time.Second)}}, invalid: "http.read_timeout"},
		{name: "bad cap", c: config.Config{HTTP: config.HTTP{MaxConnsPerClient: -1}}, invalid: "http.max_conns_per_client"},
		{name: "bad metrics_listen", c: config.Config{MetricsListen: "nope"}, invalid: "metrics_listen"},
		{name: "lease shorter than three heartbeats", c: config.Config{Runs: config.Runs{Heartbeat: config.Duration(2 * time.Second), StaleAfter: config.Duration(5 * time.Second)}}, invalid: "runs.stale_after"},
		{name: "short lease", c: config.Config{Runs: config.Runs{Heartbeat: config.Duration(100 * time.Millisecond), StaleAfter: config.Duration(time.Second)}}, tls: false},
		{name: "negative drain_timeout", c: config.Config{DrainTimeout: config.Duration(-5 * time.Second)}, invalid: "drain_timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := tc.c.WithDefaults()
			err := c.Validate()
			if tc.invalid != "" {
				if err == nil || !strings.Contains(err.Error(), tc.invalid) {
					t.Fatalf("Validate = %v, want an error naming %s", err, tc.invalid)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.ServesTLS() != tc.tls {
				t.Errorf("ServesTLS = %v, want %v", c.ServesTLS(), tc.tls)
			}
			if tc.url != "" && c.KeeperURL != tc.url {
				t.Errorf("KeeperURL = %s, want %s", c.KeeperURL, tc.url)
			}
		})
	}
}

// TestDefaultsOfTheEdge: the timeouts and limits a keeper.yml without an
// http block gets.
func TestDefaultsOfTheEdge(t *testing.T) {
	t.Parallel()
	c := config.Config{}.WithDefaults()
	if c.HTTP.ReadHeaderTimeout.Std() != 10*time.Second || c.HTTP.ReadTimeout.Std() != 60*time.Second || c.HTTP.IdleTimeout.Std() != 120*time.Second ||
		c.HTTP.MaxConnsPerClient != 64 || c.HTTP.AuthFailureBurst != 10 || c.HTTP.AuthFailureInterval.Std() != time.Second || c.PluginPathLookup {
		t.Fatalf("defaults: %+v path lookup %v", c.HTTP, c.PluginPathLookup)
	}
	if c.DrainTimeout.Std() != 60*time.Second {
		t.Fatalf("drain_timeout default = %s, want 60s", c.DrainTimeout)
	}
}
