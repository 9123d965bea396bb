package secret_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/soulstack/soulstack/internal/secret"
)

func TestSealRoundTrip(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "data.key")
	key, err := secret.LoadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Fatalf("data key mode %v", fi.Mode().Perm())
	}
	again, err := secret.LoadOrCreateKey(path)
	if err != nil || string(again) != string(key) {
		t.Fatal("data key changed on reload")
	}
	s, _ := secret.NewSealer(key)
	sealed := s.Seal([]byte(`{"db_password":"plain-canary"}`))
	if strings.Contains(sealed, "plain-canary") || !strings.HasPrefix(sealed, "sealed:v1:") {
		t.Fatalf("sealed = %s", sealed)
	}
	if s.Seal([]byte("x")) == s.Seal([]byte("x")) {
		t.Fatal("sealing is deterministic: nonces repeat")
	}
	got, err := s.Open(sealed)
	if err != nil || string(got) != `{"db_password":"plain-canary"}` {
		t.Fatalf("Open = %s, %v", got, err)
	}
	other, _ := secret.NewSealer(make([]byte, 32))
	if _, err := other.Open(sealed); !errors.Is(err, secret.ErrSealed) {
		t.Fatalf("open with another key: %v", err)
	}
	tampered := sealed[:len(sealed)-4] + "AAA="
	if _, err := s.Open(tampered); !errors.Is(err, secret.ErrSealed) {
		t.Fatalf("open tampered: %v", err)
	}
}
