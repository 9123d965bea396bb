package atomicfile_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/soulstack/soulstack/internal/atomicfile"
)

func TestWrite(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "soul.key")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := atomicfile.Write(path, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	fi, _ := os.Stat(path)
	if err != nil || string(b) != "new" || fi.Mode().Perm() != 0o600 {
		t.Fatalf("after Write: %q %v, mode %v", b, err, fi.Mode())
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("Write left %d files in the directory", len(entries))
	}
	if err := atomicfile.Write(filepath.Join(dir, "missing", "x"), nil, 0o600); err == nil {
		t.Fatal("Write into a missing directory succeeded")
	}
}
