package module

import (
	"strings"
	"testing"
)

// TestUnifiedDiff: a new file diffs from /dev/null line by line, a change
// keeps its context, a final newline added shows, binary content has no
// diff.
func TestUnifiedDiff(t *testing.T) {
	t.Parallel()
	d, ok := UnifiedDiff("/etc/motd", nil, []byte("hello\n"), false)
	if !ok || d != "--- /dev/null\n+++ b/etc/motd\n@@ -0,0 +1 @@\n+hello\n" {
		t.Fatalf("new file: %q", d)
	}
	d, _ = UnifiedDiff("/etc/app.conf", []byte("a\nb\nc\n"), []byte("a\nB\nc\n"), true)
	if !strings.Contains(d, "--- a/etc/app.conf\n+++ b/etc/app.conf\n") || !strings.Contains(d, " a\n-b\n+B\n c\n") {
		t.Fatalf("change: %q", d)
	}
	d, _ = UnifiedDiff("/f", []byte("x"), []byte("x\n"), true)
	if !strings.Contains(d, `-\ No newline at end of file`) {
		t.Fatalf("a final newline added shows nothing: %q", d)
	}
	if _, ok := UnifiedDiff("/bin/x", []byte("\x00\x01"), []byte("a\n"), true); ok {
		t.Fatal("binary content has a diff")
	}
}
