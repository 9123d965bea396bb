package module

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// golden compares got with testdata/name, or rewrites it under -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file (run go test -update to accept):\n--- got ---\n%s\n--- want ---\n%s", name, got, want)
	}
}

func TestRender(t *testing.T) {
	t.Parallel()
	minimal := Info{ID: "test.noop.done", Summary: "Do nothing.", Side: SideSoul, Idempotent: true, NeedsRoot: true}
	tests := []struct {
		name string
		info Info
	}{
		{"cloud", cloudInfo()},
		{"minimal", minimal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			golden(t, tt.name+".md.golden", RenderMarkdown(tt.info))
			golden(t, tt.name+".txt.golden", RenderText(tt.info))
		})
	}
}
