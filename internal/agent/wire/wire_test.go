package wire_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/soulstack/soulstack/internal/agent/wire"
)

func TestToken(t *testing.T) {
	t.Parallel()
	one := regexp.MustCompile(`^[0-9a-v]+$`)
	for _, sid := range []string{"web-1.example.com", "a", "db.prod.acme.test", "x*y>z", "UPPER.case"} {
		t.Run(sid, func(t *testing.T) {
			t.Parallel()
			tok := wire.Token(sid)
			if !one.MatchString(tok) {
				t.Fatalf("token %q of %q is not one plain subject token", tok, sid)
			}
			got, err := wire.SID(tok)
			if err != nil || got != sid {
				t.Fatalf("SID(%q) = %q, %v; want %q", tok, got, err, sid)
			}
			hb, err := wire.HeartbeatSID(wire.HeartbeatSubject(sid))
			if err != nil || hb != sid {
				t.Fatalf("HeartbeatSID = %q, %v", hb, err)
			}
		})
	}
	if wire.Token("a.b") == wire.Token("a-b") || wire.Token("ab") == wire.Token("a.b") {
		t.Error("distinct SIDs share a token")
	}
	for _, bad := range []string{"", "W", "0", "soulstack", "c5h6.x"} {
		if sid, err := wire.SID(bad); err == nil {
			t.Errorf("SID(%q) = %q, want an error", bad, sid)
		}
	}
	if _, err := wire.HeartbeatSID("soulstack.hb.c5h6.x"); err == nil {
		t.Error("a heartbeat subject with two tokens was accepted")
	}
}

// ExampleToken is the subject token docs/agent.md shows;
// TestDocTokens keeps the document to it.
func ExampleToken() {
	fmt.Println(wire.Token("web-1.example.com"))
	sid, _ := wire.SID(wire.Token("web-1.example.com"))
	fmt.Println(sid)
	// Output:
	// etim4b9h5pingobde1m6abj3dtmg
	// web-1.example.com
}

// TestDocTokens: every "`<sid>` is `<token>`" that docs/agent.md states is
// what Token makes of that SID, so the document cannot go stale.
func TestDocTokens(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "agent.md"))
	if err != nil {
		t.Fatal(err)
	}
	claims := regexp.MustCompile("`([a-z0-9.-]+)` is `([0-9a-v]+)`").FindAllStringSubmatch(string(doc), -1)
	if len(claims) == 0 {
		t.Fatal("docs/agent.md states no SID's token: the check would check nothing")
	}
	for _, c := range claims {
		if got := wire.Token(c[1]); got != c[2] {
			t.Errorf("docs/agent.md says %s is %s; wire.Token gives %s", c[1], c[2], got)
		}
	}
}
