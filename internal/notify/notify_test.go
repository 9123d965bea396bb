package notify

import (
	"strings"
	"testing"
	"time"
)

// TestVerify: what a receiver checks — a good signature passes; a changed
// body, another secret, an old timestamp (a replay) and a header without
// v1 fail.
func TestVerify(t *testing.T) {
	t.Parallel()
	secret, body := []byte("s3cret"), []byte(`{"event":"run.failed"}`)
	now := time.Unix(1_800_000_000, 0)
	ts := "1800000000"
	good := "t=" + ts + ",v1=" + Sign(secret, ts, body)
	if err := Verify(secret, good, body, now, 5*time.Minute); err != nil {
		t.Fatalf("good signature: %v", err)
	}
	for name, tc := range map[string]struct {
		header string
		body   []byte
		secret []byte
		now    time.Time
		want   string
	}{
		"tampered body": {good, []byte(`{"event":"run.succeeded"}`), secret, now, "does not match"},
		"other secret":  {good, body, []byte("other"), now, "does not match"},
		"replay":        {good, body, secret, now.Add(10 * time.Minute), "replay"},
		"no v1":         {"t=" + ts, body, secret, now, "no t= and v1="},
	} {
		if err := Verify(tc.secret, tc.header, tc.body, tc.now, 5*time.Minute); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", name, err, tc.want)
		}
	}
}
