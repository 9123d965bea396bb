package moduletest

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// DirTar returns a tar of the regular files directly in dir (mode 0644),
// for copying a host directory into a local VM, which does not see the
// host's /tmp or /var/tmp: `tar -x -C <dir>` on the VM's side.
func DirTar(t testing.TB, dir string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := tw.WriteHeader(&tar.Header{Name: e.Name(), Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
