package tfprovider

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/secret"
)

func TestDecodeObject(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, in, err string
		n             int
	}{
		{name: "empty", in: "", n: 0},
		{name: "object", in: `{"a": 1, "b": [2]}`, n: 2},
		{name: "array", in: `[1]`, err: "want an object"},
		{name: "null", in: `null`, err: "want an object"},
		{name: "broken", in: `{"a": `, err: "invalid JSON"},
		{name: "two_values", in: `{} {}`, err: "more than one value"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			m, err := decodeObject(c.in)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("got %v, want an error with %q", err, c.err)
				}
				return
			}
			if err != nil || len(m) != c.n {
				t.Fatalf("got %v %v", m, err)
			}
		})
	}
}

func TestResolveScenario(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "s.yaml")
	if err := os.WriteFile(file, []byte("steps: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, in, text, file, err string
	}{
		{name: "file", in: file, text: "steps: []\n", file: file},
		{name: "inline", in: "name: x\nsteps: []\n", text: "name: x\nsteps: []\n", file: inlineFile},
		{name: "missing_file", in: filepath.Join(dir, "nope.yaml"), err: "read scenario file"},
		{name: "one_line_yaml", in: "{steps: []}", text: "{steps: []}", file: inlineFile},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			text, f, err := resolveScenario(c.in)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("got %v, want %q", err, c.err)
				}
				return
			}
			if err != nil || text != c.text || f != c.file {
				t.Fatalf("got %q %q %v", text, f, err)
			}
		})
	}
}

func TestCheckSensitive(t *testing.T) {
	t.Parallel()
	const sc = "inputs:\n  pw: {type: string, secret: true}\n  host: {type: string}\nsteps: []\n"
	for _, c := range []struct {
		name      string
		input     map[string]any
		sensitive map[string]any
		err       string
	}{
		{name: "declared_secret", sensitive: map[string]any{"pw": "x"}},
		{name: "secret_looking_name", sensitive: map[string]any{"db_password": "x", "api_token": "y"}},
		{name: "plain_name", sensitive: map[string]any{"host": "x"}, err: "host"},
		{name: "in_both", input: map[string]any{"pw": "a"}, sensitive: map[string]any{"pw": "x"}, err: "both"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			err := checkSensitive(sc, "s.yaml", c.input, c.sensitive)
			if (err == nil) != (c.err == "") || (err != nil && !strings.Contains(err.Error(), c.err)) {
				t.Fatalf("got %v, want %q", err, c.err)
			}
		})
	}
}

func TestConnectionError(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{name: "refused", err: fmt.Errorf("keeper: %w", &net.OpError{Op: "dial", Err: errors.New("connection refused")}), want: true},
		{name: "dns", err: &net.DNSError{Err: "no such host", Name: "x"}, want: true},
		{name: "read", err: &net.OpError{Op: "read", Err: errors.New("reset")}},
		{name: "problem", err: &client.Problem{Status: 503, Code: "x"}},
		{name: "other", err: errors.New("boom")},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if got := connectionError(c.err); got != c.want {
				t.Fatalf("got %v, want %v", got, c.want)
			}
		})
	}
}

// TestScrub: the provider masks what it records with package secret's one
// masking function: sensitive input values (escaped in JSON or not), key
// names and token patterns; a document without secrets is kept byte for
// byte.
func TestScrub(t *testing.T) {
	t.Parallel()
	secrets := secret.NewSet()
	addStrings(secrets, map[string]any{"pw": "hunter22", "nested": []any{"abc-def-1", json.Number("12345678")}, "q": `say "hi" now`})
	got := scrubJSON(`{"out": "hunter22 and abc-def-1 and 12345678", "quoted": "x say \"hi\" now", "password": "p", "tok": "sst_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}`, secrets)
	if want := `{"out":"*** and *** and ***","password":"***","quoted":"x ***","tok":"***"}`; got != want {
		t.Fatalf("scrubJSON = %s, want %s", got, want)
	}
	if got := secrets.MaskString("failed: hunter22"); got != "failed: ***" {
		t.Fatalf("MaskString = %q", got)
	}
	const plain = `{"a":"<b> & c","n":1.50}`
	if got := scrubJSON(plain, secrets); got != plain {
		t.Fatalf("scrubJSON changed a document without secrets: %s", got)
	}
}
