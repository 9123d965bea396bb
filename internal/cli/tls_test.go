package cli_test

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/cli"
	"github.com/soulstack/soulstack/internal/config"
	"github.com/soulstack/soulstack/internal/keeper"
)

// TestTrustKeeperCA: against a keeper that listens off loopback (0.0.0.0,
// reached through 127.0.0.1) with its own CA, soulctl refuses the unknown
// certificate, names the options that fix it, and works with --ca-file,
// SOULSTACK_CA, --ca-fingerprint or SOULSTACK_CA_FINGERPRINT.
func TestTrustKeeperCA(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	c := config.Config{Listen: "0.0.0.0:0", DataDir: filepath.Join(dir, ".keeper"), Log: config.Log{Level: "info"}}.WithDefaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() { done <- keeper.Run(ctx, c, keeper.NewLogger(&logs, c), ready) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	var addr net.Addr
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatalf("keeper: %v", err)
	case <-time.After(15 * time.Second):
		t.Fatal("keeper not listening after 15s")
	}
	url := "https://127.0.0.1:" + strconv.Itoa(addr.(*net.TCPAddr).Port)
	m := regexp.MustCompile(`ca_fingerprint=(sha256:[0-9a-f]{64})`).FindStringSubmatch(logs.String())
	if m == nil {
		t.Fatalf("no fingerprint in the keeper log:\n%s", logs.String())
	}
	caFile := filepath.Join(c.TLSDir(), "ca.crt")
	raw, err := os.ReadFile(c.AdminTokenPath())
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(string(raw))

	soulctl := func(env map[string]string, args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := cli.Run(context.Background(), append([]string{"--keeper", url, "--token", token}, args...), cli.Env{
			Stdout: &stdout, Stderr: &stderr, Getenv: func(k string) string { return env[k] },
		})
		return code, stdout.String(), stderr.String()
	}
	code, _, stderr := soulctl(nil, "provider", "list")
	if code != cli.ExitFailure || !strings.Contains(stderr, "does not trust") || !strings.Contains(stderr, "--ca-file") ||
		!strings.Contains(stderr, "--ca-fingerprint") || !strings.Contains(stderr, "presented CA "+m[1]) {
		t.Fatalf("soulctl without the CA: exit %d\n%s", code, stderr)
	}
	code, _, stderr = soulctl(nil, "--ca-fingerprint", "sha256:"+strings.Repeat("00", 32), "provider", "list")
	if code != cli.ExitFailure || !strings.Contains(stderr, "pinned fingerprint") {
		t.Fatalf("soulctl with a wrong pin: exit %d\n%s", code, stderr)
	}
	if code, _, stderr = soulctl(nil, "--ca-fingerprint", "nonsense", "provider", "list"); code != cli.ExitUsage || !strings.Contains(stderr, "--ca-fingerprint") {
		t.Fatalf("soulctl with a malformed pin: exit %d\n%s", code, stderr)
	}
	for name, tc := range map[string]struct {
		env  map[string]string
		args []string
	}{
		"--ca-file":                {args: []string{"--ca-file", caFile}},
		"SOULSTACK_CA":             {env: map[string]string{"SOULSTACK_CA": caFile}},
		"--ca-fingerprint":         {args: []string{"--ca-fingerprint", m[1]}},
		"SOULSTACK_CA_FINGERPRINT": {env: map[string]string{"SOULSTACK_CA_FINGERPRINT": m[1]}},
	} {
		if code, stdout, stderr := soulctl(tc.env, append(tc.args, "token", "list")...); code != cli.ExitOK || !strings.Contains(stdout, "admin") {
			t.Errorf("soulctl with %s: exit %d\n%s%s", name, code, stdout, stderr)
		}
	}
}

// syncBuffer is a bytes.Buffer the keeper's log and the test share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
