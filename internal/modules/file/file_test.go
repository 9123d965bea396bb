package file_test

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/soulstack/soulstack/internal/module"
	"github.com/soulstack/soulstack/internal/modules/file"
	"github.com/soulstack/soulstack/internal/modules/moduletest"
)

func TestPresent(t *testing.T) {
	t.Parallel()
	tg := moduletest.New(t)
	path := filepath.Join(t.TempDir(), "motd")
	m := &file.Present{}
	content := "hello\nworld with 'quotes' and $dollars\n"

	res, err := moduletest.Run(t, m, tg, map[string]any{"path": path, "content": content, "mode": "0640"})
	if err != nil || !res.Changed {
		t.Fatalf("create: %+v, %v", res, err)
	}
	out := res.Output.(map[string]any)
	if out["mode"] != "0640" || out["size"] != int64(len(content)) || out["sha256"] != "7d9c8ee9bbca53b5aa4b3d3f0b66b44c9f0cf7dfd2aa7b11c1d58d1a5a61daac" && len(out["sha256"].(string)) != 64 {
		t.Fatalf("output = %#v", out)
	}
	if got := tg.Sh(t, "cat "+path); got != content {
		t.Fatalf("content = %q", got)
	}
	if got := strings.TrimSpace(tg.Sh(t, "stat -c %a "+path)); got != "640" {
		t.Fatalf("mode = %s", got)
	}
	// Same content and mode: unchanged.
	res, err = moduletest.Run(t, m, tg, map[string]any{"path": path, "content": content, "mode": "640"})
	if err != nil || res.Changed {
		t.Fatalf("second run changed: %+v, %v", res, err)
	}
	// Only the mode differs: changed, content kept.
	res, err = moduletest.Run(t, m, tg, map[string]any{"path": path, "content": content, "mode": "0600"})
	if err != nil || !res.Changed || res.Output.(map[string]any)["mode"] != "0600" {
		t.Fatalf("mode change: %+v, %v", res, err)
	}
	// New content keeps the mode.
	res, err = moduletest.Run(t, m, tg, map[string]any{"path": path, "content": "v2\n"})
	if err != nil || !res.Changed || res.Output.(map[string]any)["mode"] != "0600" {
		t.Fatalf("content change: %+v, %v", res, err)
	}
	// From the keeper's files.
	tg.Files = map[string][]byte{"banner.txt": []byte("from keeper\n")}
	res, err = moduletest.Run(t, m, tg, map[string]any{"path": path, "source": "banner.txt"})
	if err != nil || !res.Changed || tg.Sh(t, "cat "+path) != "from keeper\n" {
		t.Fatalf("source: %+v, %v", res, err)
	}
	_, err = moduletest.Run(t, m, tg, map[string]any{"path": filepath.Join(t.TempDir(), "no", "such", "dir", "f"), "content": "x"})
	if module.Code(err) != "file.write_failed" {
		t.Fatalf("write into a missing directory: %v (%s)", err, module.Code(err))
	}
	_, err = moduletest.Run(t, m, tg, map[string]any{"path": t.TempDir(), "content": "x"})
	if module.Code(err) != "file.stat_failed" {
		t.Fatalf("path is a directory: %v (%s)", err, module.Code(err))
	}
}

// The file gets its mode and ownership before it is renamed into place:
// nothing changes the attributes of the path itself, so no reader can
// open it between the rename and a later chmod, when it would hold the
// new content under the default or the old permissions.
func TestPresentSetsModeBeforeRename(t *testing.T) {
	t.Parallel()
	tg := moduletest.New(t)
	m := &file.Present{}
	dir := t.TempDir()
	path := filepath.Join(dir, "secret.conf")
	params := map[string]any{"path": path, "content": "password=hunter2\n", "mode": "0600"}
	owner := ""
	if os.Geteuid() == 0 {
		if _, err := user.Lookup("nobody"); err == nil {
			owner = "nobody"
			params["owner"] = owner
		}
	}
	for _, tc := range []struct {
		name   string
		before func(t *testing.T)
	}{
		{"new file", func(*testing.T) {}},
		{"replacing a world-readable file", func(t *testing.T) {
			if err := os.WriteFile(path, []byte("old\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, 0o644); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		// In sequence: the cases share the path and the directory watch.
		t.Run(tc.name, func(t *testing.T) {
			os.Remove(path)
			tc.before(t)
			w := watchDir(t, dir)
			res, err := moduletest.Run(t, m, tg, params)
			if err != nil || !res.Changed {
				t.Fatalf("run: %+v, %v", res, err)
			}
			events := w.events(t)
			renamed := false
			for _, ev := range events {
				if ev.name != "secret.conf" {
					continue
				}
				switch {
				case ev.mask&syscall.IN_MOVED_TO != 0:
					renamed = true
				case ev.mask&(syscall.IN_ATTRIB|syscall.IN_CREATE|syscall.IN_MODIFY) != 0:
					t.Errorf("the path itself was created, written or changed (inotify mask %#x): it existed with other content or permissions; events %v", ev.mask, events)
				}
			}
			if !renamed {
				t.Errorf("the file was not renamed into place; events %v", events)
			}
			fi, err := os.Stat(path)
			if err != nil || fi.Mode().Perm() != 0o600 {
				t.Fatalf("stat: %v, %v", fi, err)
			}
			if got := res.Output.(map[string]any)["owner"]; owner != "" && got != owner {
				t.Errorf("owner %v, want %s", got, owner)
			}
		})
	}
}

// A hash of a short secret is a guessing oracle: when the run says content
// carries a secret, the output has no sha256, whether the file was written
// or already matched.
func TestPresentOmitsSHA256OfSecretContent(t *testing.T) {
	t.Parallel()
	tg := moduletest.New(t)
	m := &file.Present{}
	path := filepath.Join(t.TempDir(), "pin")
	params := map[string]any{"path": path, "content": "4711", "mode": "0600"}
	secretRun := module.RunInfo{ID: "run-1", Step: "pin", SecretParams: []string{"content"}}
	for _, want := range []bool{true, false} { // written, then unchanged
		res, err := moduletest.RunWith(t, m, secretRun, tg, params)
		if err != nil || res.Changed != want {
			t.Fatalf("run: %+v, %v", res, err)
		}
		out := res.Output.(map[string]any)
		if _, ok := out["sha256"]; ok {
			t.Fatalf("changed=%v: output holds the hash of the secret: %#v", want, out)
		}
		if out["size"] != int64(4) || out["mode"] != "0600" {
			t.Fatalf("output = %#v", out)
		}
	}
	// Content that is not secret keeps its hash.
	res, err := moduletest.Run(t, m, tg, params)
	if err != nil || res.Output.(map[string]any)["sha256"] != "de650d61f5bd166a91f8ccec3158297db18b9d50eaedca238cd29dc3a214a916" {
		t.Fatalf("plain content: %+v, %v", res.Output, err)
	}
}

// dirWatch is an inotify watch on one directory.
type dirWatch struct{ fd int }

type dirEvent struct {
	mask uint32
	name string
}

func (e dirEvent) String() string { return fmt.Sprintf("%s:%#x", e.name, e.mask) }

func watchDir(t *testing.T, dir string) *dirWatch {
	t.Helper()
	fd, err := syscall.InotifyInit1(syscall.IN_NONBLOCK | syscall.IN_CLOEXEC)
	if err != nil {
		t.Fatalf("inotify: %v", err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if _, err := syscall.InotifyAddWatch(fd, dir, syscall.IN_CREATE|syscall.IN_MODIFY|syscall.IN_ATTRIB|syscall.IN_MOVED_TO|syscall.IN_MOVED_FROM); err != nil {
		t.Fatalf("inotify watch: %v", err)
	}
	return &dirWatch{fd: fd}
}

// events returns the events queued so far. The kernel queues an event
// before the call that caused it returns, so every change made by a
// finished command is there.
func (w *dirWatch) events(t *testing.T) []dirEvent {
	t.Helper()
	var out []dirEvent
	buf := make([]byte, 64<<10)
	for {
		n, err := syscall.Read(w.fd, buf)
		if err == syscall.EAGAIN {
			return out
		}
		if err != nil {
			t.Fatalf("read inotify: %v", err)
		}
		for off := 0; off+syscall.SizeofInotifyEvent <= n; {
			ev := (*syscall.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := buf[off+syscall.SizeofInotifyEvent : off+syscall.SizeofInotifyEvent+int(ev.Len)]
			out = append(out, dirEvent{mask: ev.Mask, name: strings.TrimRight(string(name), "\x00")})
			off += syscall.SizeofInotifyEvent + int(ev.Len)
		}
	}
}
