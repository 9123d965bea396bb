package sshtest

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// BuildSoul builds this module's soul binary (cmd/soul, the executor the
// SSH transport starts on souls) into dir (a directory of tb's own when
// empty) and returns its path and the SHA-256 of its content.
func BuildSoul(tb testing.TB, dir string) (path, sum string) {
	tb.Helper()
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	if dir == "" {
		dir = tb.TempDir()
	}
	path = filepath.Join(dir, "soul")
	cmd := exec.Command("go", "build", "-o", path, "./cmd/soul")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("build cmd/soul: %v\n%s", err, out)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	h := sha256.Sum256(b)
	return path, hex.EncodeToString(h[:])
}
