package file_test

import (
	"path/filepath"
	"strings"
	"testing"

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
