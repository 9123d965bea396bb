package jsoncut_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/soulstack/soulstack/internal/jsoncut"
)

func TestValueKeepsWhatFits(t *testing.T) {
	t.Parallel()
	v := map[string]any{"stdout": "hello\n", "exit_code": 0}
	c := jsoncut.Value(v, 100)
	if c.Cut || string(c.JSON) != `{"exit_code":0,"stdout":"hello\n"}` || c.Bytes != len(c.JSON) {
		t.Fatalf("got %+v", c)
	}
}

func TestValueCutsTheLongestStrings(t *testing.T) {
	t.Parallel()
	v := map[string]any{"stdout": strings.Repeat("x", 100_000), "stderr": "warn: é" + strings.Repeat("é", 50_000), "exit_code": 3, "changed": true}
	full, _ := json.Marshal(v)
	for _, max := range []int{200, 1000, 64 << 10} {
		c := jsoncut.Value(v, max)
		if !c.Cut || len(c.JSON) > max || c.Bytes != len(full) {
			t.Fatalf("max %d: cut=%v len=%d bytes=%d", max, c.Cut, len(c.JSON), c.Bytes)
		}
		var got struct {
			Stdout, Stderr string
			ExitCode       int `json:"exit_code"`
			Changed        bool
		}
		if err := json.Unmarshal(c.JSON, &got); err != nil {
			t.Fatalf("max %d: the cut value is not the same shape: %v", max, err)
		}
		if got.ExitCode != 3 || !got.Changed || !strings.HasPrefix(got.Stdout, "xxx") || !strings.HasPrefix(got.Stderr, "warn: é") ||
			!strings.Contains(got.Stdout, "bytes dropped]") || !strings.Contains(got.Stderr, "bytes dropped]") {
			t.Fatalf("max %d: got %+v", max, got)
		}
		if !json.Valid(c.JSON) || strings.ContainsRune(got.Stderr, '\uFFFD') {
			t.Fatalf("max %d: a rune was split: %q", max, got.Stderr[:40])
		}
	}
}

func TestValueTooMuchStructure(t *testing.T) {
	t.Parallel()
	items := make([]any, 1000)
	for i := range items {
		items[i] = i
	}
	c := jsoncut.Value(map[string]any{"items": items}, 100)
	if !c.Cut || string(c.JSON) != `{"bytes":3901,"truncated":true}` {
		t.Fatalf("got %s", c.JSON)
	}
}

func TestRaw(t *testing.T) {
	t.Parallel()
	raw := json.RawMessage(`{"a":"` + strings.Repeat("y", 5000) + `","n":12345678901234567890}`)
	c := jsoncut.Raw(raw, 300)
	if !c.Cut || len(c.JSON) > 300 || !strings.Contains(string(c.JSON), `"n":12345678901234567890`) {
		t.Fatalf("got %s", c.JSON)
	}
	if c := jsoncut.Raw(raw, 10_000); c.Cut || string(c.JSON) != string(raw) {
		t.Fatalf("a raw value that fits was changed")
	}
}
