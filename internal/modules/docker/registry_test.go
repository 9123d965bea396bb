package docker_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// registryBin is Debian's docker-registry (the Distribution project's
// registry), which scripts/test installs from apt.
const registryBin = "/usr/bin/docker-registry"

// freePort returns a TCP port nothing listens on now.
func freePort(t *testing.T) uint16 {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return uint16(l.Addr().(*net.TCPAddr).Port)
}

// startRegistry runs a registry on addr with its storage in a temporary
// directory, no authentication and plain HTTP, waits until it answers and
// stops it (by its PID) when the test ends. It returns the registry's
// base URL.
func startRegistry(t *testing.T, addr string) string {
	t.Helper()
	dir := t.TempDir()
	cfg := fmt.Sprintf("version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: %s\n",
		filepath.Join(dir, "data"), addr)
	cfgPath := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(registryBin, "serve", cfgPath)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", registryBin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("registry log:\n%s", logs.String())
		}
	})
	base := "http://" + addr
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-exited:
			t.Fatalf("the registry exited: %v\n%s", err, logs.String())
		default:
		}
		resp, err := http.Get(base + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the registry on %s does not answer: %v\n%s", addr, err, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// pushImage pushes a one-layer image to the registry at base as
// repo:tag through the registry's HTTP API, as docker push would: the
// layer (an uncompressed tar, gzipped here), the image config (the
// platform, cmd and the layer's diff id), then the manifest.
func pushImage(t *testing.T, base, repo, tag string, layer []byte, cmd []string) {
	t.Helper()
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	if _, err := zw.Write(layer); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	config, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config":       map[string]any{"Cmd": cmd},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{digest(layer)}},
		"history":      []map[string]any{{"created_by": "soulstack test"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	pushBlob(t, base, repo, gz.Bytes())
	pushBlob(t, base, repo, config)
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.docker.distribution.manifest.v2+json",
		"config":        map[string]any{"mediaType": "application/vnd.docker.container.image.v1+json", "size": len(config), "digest": digest(config)},
		"layers":        []map[string]any{{"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", "size": gz.Len(), "digest": digest(gz.Bytes())}},
	})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPut, base+"/v2/"+repo+"/manifests/"+tag, bytes.NewReader(manifest))
	req.Header.Set("Content-Type", "application/vnd.docker.distribution.manifest.v2+json")
	expect(t, req, http.StatusCreated)
}

// pushBlob uploads one blob: POST opens an upload, PUT to its location
// with the digest completes it.
func pushBlob(t *testing.T, base, repo string, blob []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/v2/"+repo+"/blobs/uploads/", nil)
	resp := expect(t, req, http.StatusAccepted)
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(base)
	u = u.ResolveReference(loc)
	q := u.Query()
	q.Set("digest", digest(blob))
	u.RawQuery = q.Encode()
	req, _ = http.NewRequest(http.MethodPut, u.String(), bytes.NewReader(blob))
	req.Header.Set("Content-Type", "application/octet-stream")
	expect(t, req, http.StatusCreated)
}

func expect(t *testing.T, req *http.Request, status int) *http.Response {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != status {
		t.Fatalf("%s %s: %s %s, want %d", req.Method, req.URL, resp.Status, body, status)
	}
	return resp
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// helloLayer returns a tar of a root filesystem holding one static
// program, /hello, that greets as Docker's hello-world image does.
func helloLayer(t *testing.T) []byte {
	t.Helper()
	dir := t.TempDir()
	src := "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"\\nHello from Docker!\\nThis message shows that your installation appears to be working correctly.\")\n}\n"
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module hello\n\ngo 1.21\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-trimpath", "-ldflags=-s -w", "-o", "hello", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH, "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the hello program: %v\n%s", err, out)
	}
	bin, err := os.ReadFile(filepath.Join(dir, "hello"))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "hello", Mode: 0o755, Size: int64(len(bin)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(bin); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
