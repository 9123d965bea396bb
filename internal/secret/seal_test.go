package secret_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
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

func TestSealFields(t *testing.T) {
	t.Parallel()
	s, err := secret.NewSealer(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	const canary = "canary-cfg-91ab"
	doc := json.RawMessage(`{"region":"eu","api_key":"` + canary + `","auth":{"Passphrase":{"n":1},"user":"u"},"list":[{"access_key":"` + canary + `"}],"token":null,"credentials_ref":"env:X","max_count":3}`)
	sealed, err := s.SealFields(doc)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, []byte(canary)) || bytes.Contains(sealed, []byte(`"n":1`)) {
		t.Fatalf("sealed config shows a secret: %s", sealed)
	}
	var m map[string]any
	if err := json.Unmarshal(sealed, &m); err != nil {
		t.Fatal(err)
	}
	if m["region"] != "eu" || m["credentials_ref"] != "env:X" || m["token"] != nil || !strings.HasPrefix(m["api_key"].(string), "sealed:v1:") {
		t.Fatalf("sealed = %s", sealed)
	}
	opened, err := s.OpenFields(sealed)
	if err != nil {
		t.Fatal(err)
	}
	var want, got any
	_ = json.Unmarshal(doc, &want)
	_ = json.Unmarshal(opened, &got)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("OpenFields(SealFields(doc)) = %s, want %s", opened, doc)
	}
	// A config stored before sealing existed opens as it is.
	if legacy, err := s.OpenFields(json.RawMessage(`{"api_key":"clear"}`)); err != nil || string(legacy) != `{"api_key":"clear"}` {
		t.Fatalf("legacy config = %s, %v", legacy, err)
	}
	// Another data key cannot open it.
	other, _ := secret.NewSealer(bytes.Repeat([]byte{8}, 32))
	if _, err := other.OpenFields(sealed); !errors.Is(err, secret.ErrSealed) {
		t.Fatalf("another key opened the config: %v", err)
	}
	for _, odd := range []string{``, `null`, `"text"`, `12`, `not json`} {
		if out, err := s.SealFields(json.RawMessage(odd)); err != nil || string(out) != odd {
			t.Errorf("SealFields(%q) = %q, %v", odd, out, err)
		}
	}
}
