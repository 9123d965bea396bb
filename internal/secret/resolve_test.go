package secret_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/secret"
)

// fakeVault is a FAKE Vault: an httptest server that answers only the read
// endpoint (GET /v1/<path>) the way Vault does, for a KV version 2 mount
// under secret/ and a KV version 1 mount under kv/, and only to the token
// it was made with. No Vault or OpenBao server can be installed here; the
// resolver is tested against this stand-in.
func fakeVault(t *testing.T, token string) *httptest.Server {
	t.Helper()
	kv2 := map[string]map[string]any{
		"secret/data/cloud": {"api_key": "vault-kv2-secret-1f9a", "region_ids": []any{1, 2}},
	}
	kv1 := map[string]map[string]any{
		"kv/cloud": {"api_key": "vault-kv1-secret-7c3e"},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.Header.Get("X-Vault-Token") != token {
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(`{"errors":["permission denied"]}`))
			return
		}
		if r.Method != http.MethodGet {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		path := strings.TrimPrefix(r.URL.Path, "/v1/")
		var body any
		if d, ok := kv2[path]; ok {
			body = map[string]any{
				"request_id": "fake", "lease_duration": 0, "renewable": false,
				"data": map[string]any{
					"data":     d,
					"metadata": map[string]any{"version": 3, "created_time": "2026-01-01T00:00:00Z"},
				},
			}
		} else if d, ok := kv1[path]; ok {
			body = map[string]any{"request_id": "fake", "lease_duration": 2764800, "data": d}
		} else {
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"errors":[]}`))
			return
		}
		_ = json.NewEncoder(w).Encode(body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestResolverLocalRefs(t *testing.T) {
	t.Setenv("SOULSTACK_TEST_RESOLVER_ENV", "resolver-env-secret-42aa")
	path := filepath.Join(t.TempDir(), "creds")
	if err := os.WriteFile(path, []byte("resolver-file-secret-9d01\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := secret.NewResolver(secret.ResolverOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for ref, want := range map[string]string{
		"env:SOULSTACK_TEST_RESOLVER_ENV": "resolver-env-secret-42aa",
		"file:" + path:                    "resolver-file-secret-9d01",
	} {
		got, err := r.Resolve(ctx, ref)
		if err != nil || got != want {
			t.Fatalf("Resolve(%s) = %q, %v", ref, got, err)
		}
		// The caller decides where a value is masked (the keeper's set or a
		// run's): resolving registers nothing keeper-wide.
		if m := secret.MaskString("x " + got + " y"); m != "x "+got+" y" {
			t.Fatalf("resolving %s registered its value keeper-wide: %q", ref, m)
		}
	}
	if _, err := r.Resolve(ctx, "env:SOULSTACK_TEST_RESOLVER_UNSET"); !errors.Is(err, secret.ErrUnresolved) {
		t.Fatalf("unset variable: %v", err)
	}
	if _, err := r.Resolve(ctx, "file:/nonexistent/creds"); !errors.Is(err, secret.ErrUnresolved) {
		t.Fatalf("missing file: %v", err)
	}
	if _, err := r.Resolve(ctx, "s3://bucket/key"); !errors.Is(err, secret.ErrInvalidRef) {
		t.Fatalf("bad ref: %v", err)
	}
	_, err = r.Resolve(ctx, "vault:secret/data/cloud#api_key")
	if !errors.Is(err, secret.ErrUnresolved) || !strings.Contains(err.Error(), "no Vault server is configured") {
		t.Fatalf("vault: without a Vault address: %v", err)
	}
}

func TestResolverVault(t *testing.T) {
	const token = "fake-vault-token-55b2"
	srv := fakeVault(t, token)
	t.Setenv("SOULSTACK_TEST_VAULT_TOKEN", token)
	keeper := secret.NewKeeper()
	r, err := secret.NewResolver(secret.ResolverOptions{
		VaultAddress:  srv.URL,
		VaultTokenRef: "env:SOULSTACK_TEST_VAULT_TOKEN",
		VaultTimeout:  5 * time.Second,
		Secrets:       keeper,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	t.Run("kv2", func(t *testing.T) {
		got, err := r.Resolve(ctx, "vault:secret/data/cloud#api_key")
		if err != nil || got != "vault-kv2-secret-1f9a" {
			t.Fatalf("Resolve = %q, %v", got, err)
		}
		if keeper.MaskString(got) != got {
			t.Fatal("resolving registered the Vault secret keeper-wide; the caller decides")
		}
		if keeper.MaskString("token "+token) != "token "+secret.Masked {
			t.Fatal("the Vault token is not masked")
		}
	})
	t.Run("kv2 non-string field", func(t *testing.T) {
		got, err := r.Resolve(ctx, "vault:secret/data/cloud#region_ids")
		if err != nil || got != "[1,2]" {
			t.Fatalf("Resolve = %q, %v", got, err)
		}
	})
	t.Run("kv1", func(t *testing.T) {
		got, err := r.Resolve(ctx, "vault:kv/cloud#api_key")
		if err != nil || got != "vault-kv1-secret-7c3e" {
			t.Fatalf("Resolve = %q, %v", got, err)
		}
	})
	for _, tc := range []struct {
		name, ref, want string
	}{
		{"missing field", "vault:secret/data/cloud#nope", `has no field "nope"`},
		{"missing path", "vault:secret/data/nothing#api_key", "no secret at secret/data/nothing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := r.Resolve(ctx, tc.ref)
			if !errors.Is(err, secret.ErrUnresolved) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Resolve(%s) = %v, want ErrUnresolved saying %q", tc.ref, err, tc.want)
			}
		})
	}
	t.Run("wrong token", func(t *testing.T) {
		t.Setenv("SOULSTACK_TEST_VAULT_TOKEN", "fake-vault-wrong-token")
		_, err := r.Resolve(ctx, "vault:secret/data/cloud#api_key")
		if !errors.Is(err, secret.ErrUnresolved) || !strings.Contains(err.Error(), "403") {
			t.Fatalf("Resolve with a wrong token = %v", err)
		}
		if strings.Contains(err.Error(), "fake-vault-wrong-token") {
			t.Fatalf("the error shows the token: %v", err)
		}
	})
	t.Run("token unset", func(t *testing.T) {
		t.Setenv("SOULSTACK_TEST_VAULT_TOKEN", "")
		os.Unsetenv("SOULSTACK_TEST_VAULT_TOKEN")
		_, err := r.Resolve(ctx, "vault:secret/data/cloud#api_key")
		if !errors.Is(err, secret.ErrUnresolved) || !strings.Contains(err.Error(), "vault token") {
			t.Fatalf("Resolve without a token = %v", err)
		}
	})
}

func TestResolverVaultUnreachable(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	addr := srv.URL
	srv.Close() // nothing listens there any more
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("fake-vault-token-0c7d\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := secret.NewResolver(secret.ResolverOptions{VaultAddress: addr, VaultTokenRef: "file:" + path})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := r.Resolve(ctx, "vault:secret/data/cloud#api_key"); !errors.Is(err, secret.ErrUnresolved) {
		t.Fatalf("Resolve against an unreachable Vault = %v", err)
	}
}

func TestNewResolverValidates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts secret.ResolverOptions
		want string
	}{
		{"bad address", secret.ResolverOptions{VaultAddress: "vault.example:8200", VaultTokenRef: "env:T"}, "vault address"},
		{"no token ref", secret.ResolverOptions{VaultAddress: "http://127.0.0.1:8200"}, "token_ref is required"},
		{"bad token ref", secret.ResolverOptions{VaultAddress: "http://127.0.0.1:8200", VaultTokenRef: "T"}, "token_ref"},
		{"token from vault", secret.ResolverOptions{VaultAddress: "http://127.0.0.1:8200", VaultTokenRef: "vault:x#y"}, "cannot itself come from Vault"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if _, err := secret.NewResolver(tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewResolver = %v, want an error saying %q", err, tc.want)
			}
		})
	}
}
