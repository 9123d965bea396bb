//go:build unix

package localcloud

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func ownerOf(t *testing.T, fi os.FileInfo) (uid, gid int) {
	t.Helper()
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		t.Skip("no owner information on this system")
	}
	return int(st.Uid), int(st.Gid)
}

func TestWriteFiles(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("chown to other users needs root")
	}
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("root:x:0:0::/root:/bin/sh\napp:x:1234:1234::/home/app:/bin/sh\n"), 0o644)
	os.WriteFile(filepath.Join(root, "etc/group"), []byte("root:x:0:\napp:x:1234:\nstaff:x:50:\n"), 0o644)
	os.WriteFile(filepath.Join(root, "etc/existing"), []byte("first\n"), 0o644)
	u, err := parseUserdata(`#cloud-config
write_files:
  - path: /opt/new/dir/file
    content: new
    permissions: '0640'
    owner: app:staff
  - path: /etc/existing
    content: "second\n"
    append: true
  - path: /etc/later
    content: later
    defer: true
  - path: /etc/nobody-owns
    owner: nosuchuser
`)
	if err != nil {
		t.Fatal(err)
	}
	err = u.writeFiles(root, false)
	if err == nil || !strings.Contains(err.Error(), "nosuchuser") {
		t.Errorf("writeFiles with an unknown owner: %v", err)
	}
	fi, err := os.Stat(filepath.Join(root, "opt/new/dir/file"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o640 {
		t.Errorf("mode %v", fi.Mode())
	}
	if uid, gid := ownerOf(t, fi); uid != 1234 || gid != 50 {
		t.Errorf("owner %d:%d, want 1234:50", uid, gid)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "etc/existing")); string(b) != "first\nsecond\n" {
		t.Errorf("append: %q", b)
	}
	if _, err := os.Stat(filepath.Join(root, "etc/later")); err == nil {
		t.Error("a deferred file was written in the first stage")
	}
	if err := u.writeFiles(root, true); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "etc/later")); string(b) != "later" {
		t.Errorf("deferred: %q", b)
	}
}
