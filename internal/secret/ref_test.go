package secret_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/soulstack/soulstack/internal/secret"
)

func TestParseRef(t *testing.T) {
	t.Parallel()
	good := map[string]secret.Ref{
		"env:AWS_KEY":             {Scheme: "env", Name: "AWS_KEY"},
		"file:/etc/soulstack/key": {Scheme: "file", Name: "/etc/soulstack/key"},
		"vault:kv/data/cloud#key": {Scheme: "vault", Name: "kv/data/cloud", Field: "key"},
	}
	for in, want := range good {
		got, err := secret.ParseRef(in)
		if err != nil || got != want || got.String() != in {
			t.Errorf("ParseRef(%q) = %+v, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "AKIA123", "env:", "env:1BAD", "file:relative", "file:/a/../b", "vault:kv/x", "vault:#f", "s3://b/k", "https://x"} {
		if _, err := secret.ParseRef(in); !errors.Is(err, secret.ErrInvalidRef) {
			t.Errorf("ParseRef(%q) err = %v, want ErrInvalidRef", in, err)
		}
	}
}

// TestResolveRegistersNothing: resolving a reference reads it; where its
// value is masked is the caller's choice (a soul's key is masked in the run
// that uses it, never keeper-wide, so a soul whose key file holds a common
// word cannot rewrite every answer).
func TestResolveRegistersNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(path, []byte("file-secret-8c2d\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r, _ := secret.ParseRef("file:" + path)
	v, err := r.Resolve()
	if err != nil || v != "file-secret-8c2d" {
		t.Fatalf("Resolve = %q, %v", v, err)
	}
	if got := secret.MaskString("x file-secret-8c2d y"); got != "x file-secret-8c2d y" {
		t.Fatalf("resolving registered the value keeper-wide: %q", got)
	}
	t.Setenv("SOULSTACK_TEST_ENV_SECRET", "env-secret-77e1")
	r, _ = secret.ParseRef("env:SOULSTACK_TEST_ENV_SECRET")
	if v, err := r.Resolve(); err != nil || v != "env-secret-77e1" || secret.MaskString(v) != v {
		t.Fatalf("env Resolve = %q, %v", v, err)
	}
	r, _ = secret.ParseRef("env:SOULSTACK_TEST_UNSET_VAR")
	if _, err := r.Resolve(); err == nil {
		t.Fatal("unset env var resolved")
	}
}
