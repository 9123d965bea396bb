package secret_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/soulstack/soulstack/internal/secret"
)

// TestSetScopesValues: a run's Set masks its own values in what it masks,
// and neither another run's Set nor the keeper-wide functions mask them.
func TestSetScopesValues(t *testing.T) {
	t.Parallel()
	a, b := secret.NewSet(), secret.NewSet()
	a.Add("Succeeded")
	doc := map[string]any{"phase": "Succeeded", "out": "it Succeeded"}
	if got, _ := json.Marshal(a.Mask(doc)); string(got) != `{"out":"it ***","phase":"***"}` {
		t.Fatalf("own set: %s", got)
	}
	for name, got := range map[string]any{"other run's set": b.Mask(doc), "keeper": secret.Mask(doc), "nil set": (*secret.Set)(nil).Mask(doc)} {
		if b, _ := json.Marshal(got); string(b) != `{"out":"it Succeeded","phase":"Succeeded"}` {
			t.Errorf("%s masks another run's value: %s", name, b)
		}
	}
	if got := b.MaskString("it Succeeded"); got != "it Succeeded" {
		t.Errorf("other set: %q", got)
	}
	if got, _ := a.MarshalMasked(struct {
		Phase string `json:"phase"`
	}{"Succeeded"}); string(got) != `{"phase":"***"}` {
		t.Errorf("MarshalMasked with the run's set = %s", got)
	}
	if got := string(a.MaskJSON([]byte(`{"x":"Succeeded"}`))); got != `{"x":"***"}` {
		t.Errorf("MaskJSON with the run's set = %s", got)
	}
	// The keeper's own secrets are masked in the data of a run its
	// keeper made the set of, not in another keeper's.
	k := secret.NewKeeper()
	k.Register("keeper-own-secret-0c11")
	if got := k.NewSet().MaskString("k=keeper-own-secret-0c11"); got != "k=***" {
		t.Errorf("a run's set does not mask the keeper's secret: %q", got)
	}
	if got := b.MaskString("k=keeper-own-secret-0c11"); got != "k=keeper-own-secret-0c11" {
		t.Errorf("a set of no keeper masks a keeper's secret: %q", got)
	}
}

// TestSetLimits: values shorter than MinValueLen are ignored, duplicates
// count once, and a set given more than MaxRunValues values overflows and
// then masks every string whole rather than let the extra ones leak.
func TestSetLimits(t *testing.T) {
	t.Parallel()
	s := secret.NewSet()
	s.Add("short")
	s.Add("")
	if s.Len() != 0 || s.MaskString("short") != "short" {
		t.Fatalf("a value under %d bytes was kept", secret.MinValueLen)
	}
	for i := range secret.MaxRunValues {
		s.Add(fmt.Sprintf("value-%05d", i))
		s.Add(fmt.Sprintf("value-%05d", i))
	}
	if s.Len() != secret.MaxRunValues || s.Overflowed() {
		t.Fatalf("Len = %d, overflowed %v", s.Len(), s.Overflowed())
	}
	if got := s.MaskString("a value-00007 b"); got != "a *** b" {
		t.Fatalf("MaskString = %q", got)
	}
	s.Add("one-value-too-many")
	if !s.Overflowed() || s.Len() != secret.MaxRunValues {
		t.Fatalf("after one more: Len = %d, overflowed %v", s.Len(), s.Overflowed())
	}
	got, _ := json.Marshal(s.Mask(map[string]any{"msg": "one-value-too-many", "harmless": "text", "empty": "", "n": 1, "ok": true}))
	if string(got) != `{"empty":"","harmless":"***","msg":"***","n":1,"ok":true}` {
		t.Fatalf("an overflowed set masks %s", got)
	}
	// Longest first: a value containing another is masked whole.
	o := secret.NewSet()
	o.Add("hunter2")
	o.Add("hunter2-long-form")
	if got := o.MaskString("hunter2-long-form/hunter2"); got != "***/***" {
		t.Fatalf("overlapping values: %q", got)
	}
}

// TestTokensMaskedByPattern: sst_ and sbt_ tokens are masked wherever they
// appear, by any masker, registered or not; short look-alikes are kept.
func TestTokensMaskedByPattern(t *testing.T) {
	t.Parallel()
	const api = "sst_Xy3kP0aB1cD2eF3gH4iJ5kL6mN7oP8qR9sT0uV1wX2"
	const boot = "sbt_q-w_e1r2t3y4u5i6o7p8a9s0d1f2g3h4j5k6l7z8x"
	cases := map[string]string{
		"Authorization: Bearer " + api:         "Authorization: Bearer ***",
		"token=" + boot + "&next=1":            "token=***&next=1",
		api + boot:                             "***",
		"sst_not-a-token":                      "sst_not-a-token",
		"sbt_0123456789abcde and sbt_":         "sbt_0123456789abcde and sbt_",
		"sbt_0123456789abcdef!":                "***!",
		"plain text without any token_here":    "plain text without any token_here",
		`{"json":"` + api + `"}`:               `{"json":"***"}`,
		"base64 of it: c3N0X1h5M2tQMGFCMWNEMg": "base64 of it: c3N0X1h5M2tQMGFCMWNEMg",
	}
	for in, want := range cases {
		if got := secret.MaskString(in); got != want {
			t.Errorf("MaskString(%q) = %q, want %q", in, got, want)
		}
		if got := secret.NewSet().MaskString(in); got != want {
			t.Errorf("Set.MaskString(%q) = %q, want %q", in, got, want)
		}
	}
	var buf bytes.Buffer
	slog.New(secret.NewSet().LogHandler(slog.NewTextHandler(&buf, nil))).Info("joined with "+boot, "err", errors.New("bad "+api))
	if strings.Contains(buf.String(), boot) || strings.Contains(buf.String(), api) {
		t.Fatalf("log line shows a token: %s", buf.String())
	}
}

// TestSetLogHandler: a run's log handler masks the run's own values; the
// keeper's handler does not know them.
func TestSetLogHandler(t *testing.T) {
	t.Parallel()
	s := secret.NewSet()
	s.Add("run-log-canary-5a")
	var own, keeper bytes.Buffer
	slog.New(s.LogHandler(slog.NewJSONHandler(&own, nil))).With("a", "run-log-canary-5a").WithGroup("g").Info("saw run-log-canary-5a", "b", "x run-log-canary-5a")
	if strings.Contains(own.String(), "run-log-canary-5a") {
		t.Fatalf("run log shows the run's secret: %s", own.String())
	}
	slog.New(secret.NewLogHandler(slog.NewJSONHandler(&keeper, nil))).Info("saw run-log-canary-5a")
	if !strings.Contains(keeper.String(), "run-log-canary-5a") {
		t.Fatalf("the keeper log masks a run's value: %s", keeper.String())
	}
}
