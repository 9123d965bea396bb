package drift

import (
	"strings"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/store"
)

func TestParseKey(t *testing.T) {
	for key, want := range map[string]struct {
		sid  string
		seed int64
		ok   bool
	}{
		"drift:s1:7:1700000000":   {"s1", 7, true},
		"drift:s1:x:1":            {ok: false},
		"drift:s1:7":              {ok: false},
		"seed:s1:7":               {ok: false},
		"remediate:run_1":         {ok: false},
		"drift:a.b.test:12:99:00": {ok: false},
	} {
		sid, seed, ok := parseKey(key)
		if ok != want.ok || ok && (sid != want.sid || seed != want.seed) {
			t.Errorf("parseKey(%q) = %q %d %v, want %q %d %v", key, sid, seed, ok, want.sid, want.seed, want.ok)
		}
	}
	if IsCheck(store.Run{Key: "drift:s1:7:1", Mode: "apply"}) || !IsCheck(store.Run{Key: "drift:s1:7:1", Mode: "check"}) {
		t.Error("IsCheck: a drift key is a drift check only in mode check")
	}
}

// TestBySoul: a soul shows its seeds' worst state, and counts as
// acknowledged only when it is drifted and every drifted seed is.
func TestBySoul(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	later := now.Add(time.Hour)
	ds := []store.SoulDrift{
		{SID: "a", SeedID: 1, State: store.DriftInSync},
		{SID: "a", SeedID: 2, State: store.DriftUnknown},
		{SID: "b", SeedID: 1, State: store.DriftDrifted, AckUntil: &later},
		{SID: "b", SeedID: 2, State: store.DriftInSync},
		{SID: "c", SeedID: 1, State: store.DriftDrifted, AckUntil: &later},
		{SID: "c", SeedID: 2, State: store.DriftDrifted},
		{SID: "d", SeedID: 1, State: store.DriftInSync, AckUntil: &later},
	}
	got := bySoul(ds, now)
	want := []struct {
		sid, state string
		acked      bool
		seeds      int
	}{{"a", store.DriftUnknown, false, 2}, {"b", store.DriftDrifted, true, 2}, {"c", store.DriftDrifted, false, 2}, {"d", store.DriftInSync, false, 1}}
	if len(got) != len(want) {
		t.Fatalf("bySoul = %+v", got)
	}
	for i, w := range want {
		g := got[i]
		if g.SID != w.sid || g.State != w.state || g.Acknowledged != w.acked || len(g.Seeds) != w.seeds {
			t.Errorf("soul %d = %s %s acked=%v seeds=%d, want %+v", i, g.SID, g.State, g.Acknowledged, len(g.Seeds), w)
		}
	}
	if got[1].Seeds[0].AckUntil == nil || got[2].Seeds[1].AckUntil != nil {
		t.Errorf("an acknowledged seed shows its end, another none: %+v", got[1:3])
	}
}

func TestParseAckUntil(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"12h":                  now.Add(12 * time.Hour),
		"7d":                   now.Add(7 * 24 * time.Hour),
		"2026-12-05T00:00:00Z": time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC),
	} {
		got, err := parseAckUntil(in, now)
		if err != nil || !got.Equal(want) {
			t.Errorf("parseAckUntil(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for in, why := range map[string]string{
		"2026-12-03T00:00:00Z": "has passed",
		"0d":                   "not a number of days",
		"xd":                   "not a number of days",
		"-1h":                  "not a time",
		"soon":                 "not a time",
	} {
		if _, err := parseAckUntil(in, now); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("parseAckUntil(%q) = %v, want an error saying %q", in, err, why)
		}
	}
}
