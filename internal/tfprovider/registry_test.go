package tfprovider_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/soulstack/soulstack/client"
)

func TestProviderAndProfile(t *testing.T) {
	t.Parallel()
	k := startKeeper(t)
	h := connect(t, k)

	provCfg := map[string]any{"name": "local", "driver": "local", "fqdn_suffix": "local.test", "config": `{"subnet": "10.213.0.0/24"}`}
	prov, d := h.apply("soulstack_provider", nil, provCfg)
	if d != "" {
		t.Fatal(d)
	}
	if got := prov.attrs(); got["id"] != "local" || got["config"] != `{"subnet": "10.213.0.0/24"}` || got["created_at"] == nil || got["region"] != nil {
		t.Fatalf("provider state: %v", got)
	}
	p, err := k.C.ProviderGet(context.Background(), "local")
	if err != nil || p.FQDNSuffix != "local.test" {
		t.Fatalf("keeper has %+v, %v", p, err)
	}

	// Nothing changed: the plan keeps the state and replaces nothing.
	if p := h.plan("soulstack_provider", prov, provCfg); p.errs != "" || len(p.replace) != 0 || !p.v.Equal(prov.v) {
		t.Fatalf("no-change plan: replace %v errs %s", p.replace, p.errs)
	}
	// A change replaces.
	changed := map[string]any{"name": "local", "driver": "local", "fqdn_suffix": "other.test", "config": `{"subnet": "10.213.0.0/24"}`}
	if p := h.plan("soulstack_provider", prov, changed); len(p.replace) == 0 {
		t.Fatalf("changed fqdn_suffix: want a replacement, got %v %s", p.replace, p.errs)
	}

	profCfg := map[string]any{"name": "small", "provider_name": "local", "spec": `{"cpus":1,"memory_mb":512}`}
	prof, d := h.apply("soulstack_profile", nil, profCfg)
	if d != "" {
		t.Fatal(d)
	}
	if prof.str("spec") != `{"cpus":1,"memory_mb":512}` || prof.str("provider_name") != "local" {
		t.Fatalf("profile state: %v", prof.attrs())
	}

	t.Run("import", func(t *testing.T) {
		imp, d := h.importState("soulstack_profile", "small")
		if d != "" {
			t.Fatal(d)
		}
		if a := imp.attrs(); a["name"] != "small" || a["provider_name"] != "local" || a["created_at"] != prof.str("created_at") {
			t.Fatalf("imported profile: %v", a)
		}
		// The imported state plans no change against the config.
		if p := h.plan("soulstack_profile", imp, profCfg); p.errs != "" || len(p.replace) != 0 {
			t.Fatalf("plan after import: replace %v errs %s", p.replace, p.errs)
		}
		ip, d := h.importState("soulstack_provider", "local")
		if d != "" {
			t.Fatal(d)
		}
		if a := ip.attrs(); a["driver"] != "local" || a["fqdn_suffix"] != "local.test" || !strings.Contains(a["config"].(string), "10.213.0.0/24") {
			t.Fatalf("imported provider: %v", a)
		}
		if _, d := h.importState("soulstack_provider", "nope"); d != "" {
			t.Fatalf("import of a missing provider: %s", d)
		}
	})

	t.Run("in_use", func(t *testing.T) {
		d := h.destroy(prov)
		if !strings.Contains(d, "provider.in_use") || !strings.Contains(d, "still in use") || !strings.Contains(d, "409") {
			t.Fatalf("want a provider.in_use diagnostic, got %q", d)
		}
	})

	if d := h.destroy(prof); d != "" {
		t.Fatal(d)
	}
	if d := h.destroy(prov); d != "" {
		t.Fatal(d)
	}
	if gone, d := h.read(prov); d != "" || gone != nil {
		t.Fatalf("read after destroy: %v %s", gone, d)
	}

	t.Run("profile_provider_missing", func(t *testing.T) {
		_, d := h.apply("soulstack_profile", nil, map[string]any{"name": "x", "provider_name": "nope", "spec": "{}"})
		if !strings.Contains(d, "profile.provider_missing") {
			t.Fatalf("got %q", d)
		}
	})
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	k := startKeeper(t)

	t.Run("bad_token", func(t *testing.T) {
		h := newTF(t)
		if d := h.configure(map[string]any{"endpoint": k.URL, "token": "sst_wrong"}); d != "" {
			t.Fatal(d)
		}
		_, d := h.apply("soulstack_provider", nil, map[string]any{"name": "p", "driver": "local"})
		if !strings.Contains(d, "refused the API token") || !strings.Contains(d, "401") {
			t.Fatalf("want a 401 diagnostic, got %q", d)
		}
		if strings.Contains(d, "sst_wrong") || strings.Contains(h.providerLog(), "sst_wrong") {
			t.Fatal("the token appears in a diagnostic or the provider log")
		}
	})

	t.Run("no_token", func(t *testing.T) {
		if os.Getenv("SOULSTACK_TOKEN") != "" {
			t.Skip("SOULSTACK_TOKEN is set in the environment")
		}
		h := newTF(t)
		if d := h.configure(map[string]any{"endpoint": k.URL}); !strings.Contains(d, "Missing keeper API token") {
			t.Fatalf("got %q", d)
		}
	})

	t.Run("unreachable", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		h := newTF(t)
		if d := h.configure(map[string]any{"endpoint": "http://" + addr, "token": k.Token, "timeouts": map[string]any{"retry_sec": 1}}); d != "" {
			t.Fatal(d)
		}
		_, d := h.apply("soulstack_provider", nil, map[string]any{"name": "p", "driver": "local"})
		if !strings.Contains(d, "keeper unreachable") || !strings.Contains(d, "tries") || !strings.Contains(d, addr) {
			t.Fatalf("want an unreachable diagnostic, got %q", d)
		}
	})

	t.Run("not_json", func(t *testing.T) {
		h := connect(t, k)
		for _, c := range []struct{ res, attr string }{
			{"soulstack_run", "input"}, {"soulstack_run", "sensitive_input"}, {"soulstack_profile", "spec"}, {"soulstack_provider", "config"},
		} {
			cfg := map[string]any{"scenario": "x.yaml", "name": "n", "provider_name": "p", "driver": "d", "spec": "{}", c.attr: `{"a": 1`}
			for _, a := range h.schema.ResourceSchemas[c.res].Block.Attributes {
				if _, ok := cfg[a.Name]; ok && !a.Required && !a.Optional {
					delete(cfg, a.Name)
				}
			}
			keep := map[string]any{}
			for _, a := range h.schema.ResourceSchemas[c.res].Block.Attributes {
				if v, ok := cfg[a.Name]; ok {
					keep[a.Name] = v
				}
			}
			d := h.validate(c.res, keep)
			if !strings.Contains(d, "Not a JSON object") || !strings.Contains(d, `[at AttributeName("`+c.attr+`")]`) {
				t.Errorf("%s.%s: want a diagnostic at the attribute, got %q", c.res, c.attr, d)
			}
		}
		d := h.validate("soulstack_run", map[string]any{"scenario": "x.yaml", "input": `[1, 2]`})
		if !strings.Contains(d, "want an object") {
			t.Errorf("an array input: got %q", d)
		}
	})
}

// TestKeeperCA: against an HTTPS keeper with its own CA the provider
// refuses the unknown certificate, and works with ca_file or
// ca_fingerprint; a malformed fingerprint is a configuration error.
func TestKeeperCA(t *testing.T) {
	t.Parallel()
	k := startKeeperOn(t, "0.0.0.0:0")
	caFile := filepath.Join(k.Dir, ".keeper", "tls", "ca.crt")
	ca, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(ca)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	fp := client.Fingerprint(cert)

	h := newTF(t)
	if d := h.configure(map[string]any{"endpoint": k.URL, "token": k.Token}); d != "" {
		t.Fatal(d)
	}
	if _, d := h.apply("soulstack_provider", nil, map[string]any{"name": "p0", "driver": "local"}); !strings.Contains(d, "does not trust") || !strings.Contains(d, fp) {
		t.Fatalf("apply against an unknown CA: %s", d)
	}
	if d := newTF(t).configure(map[string]any{"endpoint": k.URL, "token": k.Token, "ca_fingerprint": "sha256:nope"}); !strings.Contains(d, "ca_fingerprint") && !strings.Contains(d, "fingerprint") {
		t.Fatalf("malformed fingerprint: %q", d)
	}
	for i, cfg := range []map[string]any{
		{"endpoint": k.URL, "token": k.Token, "ca_file": caFile},
		{"endpoint": k.URL, "token": k.Token, "ca_fingerprint": fp},
	} {
		h := newTF(t)
		if d := h.configure(cfg); d != "" {
			t.Fatal(d)
		}
		if _, d := h.apply("soulstack_provider", nil, map[string]any{"name": fmt.Sprintf("p%d", i+1), "driver": "local"}); d != "" {
			t.Fatalf("apply with %v: %s", cfg, d)
		}
	}
}
