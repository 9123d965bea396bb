package keepertest

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// Binaries builds this module's commands for one test process, each once,
// when a test first asks for it (go build into Dir), so that a package of
// tests links each plugin, agent or CLI once instead of once per test.
// Install puts a copy where a test wants it (a keeper's plugin dir): a
// test may change its copy (its mode, its bytes) without touching the
// others'. Dir is made by the TestMain and removed when the tests end.
type Binaries struct {
	Dir string

	mu    sync.Mutex
	built map[string]*binary
}

type binary struct {
	once sync.Once
	path string
	err  error
}

// moduleRoot is this module's directory.
func moduleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Path returns the executable of the main package pkg (a directory of this
// module, "cmd/soul-cloud-local", or an import path), building it the
// first time; it fails tb when it does not build.
func (b *Binaries) Path(tb testing.TB, pkg string) string {
	tb.Helper()
	b.mu.Lock()
	if b.built == nil {
		b.built = map[string]*binary{}
	}
	bin := b.built[pkg]
	if bin == nil {
		bin = &binary{}
		b.built[pkg] = bin
	}
	b.mu.Unlock()
	bin.once.Do(func() {
		dir, err := os.MkdirTemp(b.Dir, "bin-")
		if err != nil {
			bin.err = err
			return
		}
		bin.path = filepath.Join(dir, path.Base(pkg))
		target := pkg
		if first, _, _ := strings.Cut(pkg, "/"); !strings.Contains(first, ".") {
			target = "./" + pkg // a directory of this module
		}
		cmd := exec.Command("go", "build", "-o", bin.path, target)
		cmd.Dir = moduleRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			bin.err = fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
		}
	})
	if bin.err != nil {
		tb.Fatal(bin.err)
	}
	return bin.path
}

// Install copies the executable of pkg (see Path) into dir as name ("":
// the package's last element) and returns the copy's path.
func (b *Binaries) Install(tb testing.TB, pkg, dir, name string) string {
	tb.Helper()
	src := b.Path(tb, pkg)
	if name == "" {
		name = filepath.Base(src)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	dst := filepath.Join(dir, name)
	if err := copyExecutable(src, dst); err != nil {
		tb.Fatal(err)
	}
	return dst
}

func copyExecutable(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
