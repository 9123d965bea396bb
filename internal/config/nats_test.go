package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/config"
)

// TestNATS: the bus's defaults and every refusal of its section, each
// naming the field; Validate leaves the config as it was.
func TestNATS(t *testing.T) {
	t.Parallel()
	ext := func(n config.NATS) config.Config { return config.Config{NATS: n} }
	for _, tc := range []struct {
		name    string
		c       config.Config
		listen  string
		invalid string
	}{
		// Where the agent listener is (the API's host: VMs reach a loopback
		// one at their gateway), two ports above the API.
		{name: "default", c: config.Config{}, listen: "127.0.0.1:8422"},
		{name: "api on port 0", c: config.Config{Listen: "127.0.0.1:0"}, listen: "127.0.0.1:0"},
		{name: "api on every address", c: config.Config{Listen: "0.0.0.0:9000"}, listen: "0.0.0.0:9002"},
		{name: "agent listener narrowed", c: config.Config{Listen: "127.0.0.1:9000", AgentListen: "10.213.0.1:9001"}, listen: "10.213.0.1:9002"},
		{name: "agent listener off", c: config.Config{Listen: "127.0.0.1:9000", AgentListen: "off"}, listen: "127.0.0.1:9002"},
		{name: "explicit", c: ext(config.NATS{Listen: "10.213.0.1:7422", Advertise: []string{"tls://10.213.0.1:7422"}}), listen: "10.213.0.1:7422"},
		{name: "external", c: ext(config.NATS{URL: "tls://a:4222,tls://b:4222", User: "auth", PasswordRef: "env:P", IssuerSeedRef: "file:/s"}), listen: ""},
		{name: "external with creds", c: ext(config.NATS{URL: "nats://a:4222", CredsFile: "/c", IssuerSeedRef: "env:S"}), listen: ""},
		{name: "bad listen", c: ext(config.NATS{Listen: "nope"}), invalid: "nats.listen"},
		{name: "bad heartbeat", c: ext(config.NATS{Heartbeat: config.Duration(-time.Second)}), invalid: "nats.heartbeat"},
		{name: "negative session", c: ext(config.NATS{SessionTTL: config.Duration(-time.Minute)}), invalid: "nats.session_ttl"},
		{name: "bad advertise", c: ext(config.NATS{Advertise: []string{"http://x:1"}}), invalid: "nats.advertise[0]"},
		{name: "external keys on embedded", c: ext(config.NATS{User: "auth"}), invalid: "nats.user: only applies"},
		{name: "listen and url", c: ext(config.NATS{Listen: "127.0.0.1:1", URL: "tls://a:1", User: "u", PasswordRef: "env:P", IssuerSeedRef: "env:S"}), invalid: "nats.listen: contradicts"},
		{name: "bad url", c: ext(config.NATS{URL: "tls://a:1,a", IssuerSeedRef: "env:S", User: "u", PasswordRef: "env:P"}), invalid: "nats.url: URL 2"},
		{name: "no issuer", c: ext(config.NATS{URL: "tls://a:1", User: "u", PasswordRef: "env:P"}), invalid: "nats.issuer_seed_ref"},
		{name: "issuer not a ref", c: ext(config.NATS{URL: "tls://a:1", User: "u", PasswordRef: "env:P", IssuerSeedRef: "SAxxx"}), invalid: "nats.issuer_seed_ref: want"},
		{name: "no user", c: ext(config.NATS{URL: "tls://a:1", IssuerSeedRef: "env:S"}), invalid: "nats.user"},
		{name: "password not a ref", c: ext(config.NATS{URL: "tls://a:1", IssuerSeedRef: "env:S", User: "u", PasswordRef: "hunter2"}), invalid: "nats.password_ref"},
		{name: "creds and user", c: ext(config.NATS{URL: "tls://a:1", IssuerSeedRef: "env:S", User: "u", PasswordRef: "env:P", CredsFile: "/c"}), invalid: "nats.creds_file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := tc.c.WithDefaults()
			before := c.NATS
			err := c.Validate()
			if c.NATS.Listen != before.Listen || c.NATS.Heartbeat != before.Heartbeat {
				t.Error("Validate changed the config")
			}
			if tc.invalid != "" {
				if err == nil || !strings.Contains(err.Error(), tc.invalid) {
					t.Fatalf("Validate = %v, want an error naming %s", err, tc.invalid)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !c.NATS.On() || c.NATS.Listen != tc.listen || c.NATS.Heartbeat.Std() != 5*time.Second || c.NATS.SessionTTL.Std() != 15*time.Minute {
				t.Errorf("defaults %+v, want on, listen %q, 5s, 15m", c.NATS, tc.listen)
			}
		})
	}
	off := false
	if c := (config.Config{NATS: config.NATS{Enabled: &off, Listen: "nope"}}).WithDefaults(); c.Validate() != nil || c.NATS.On() {
		t.Error("a disabled bus is still validated or on")
	}
}

// An unknown key under nats: is an error with its position.
func TestNATSUnknownKey(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "keeper.yml")
	if err := os.WriteFile(path, []byte("nats:\n  listen: 127.0.0.1:4222\n  lisen: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := config.Load(path)
	if err == nil || !strings.Contains(err.Error(), "lisen") || !strings.Contains(err.Error(), "3:") {
		t.Fatalf("Load = %v, want an error naming lisen at line 3", err)
	}
}
