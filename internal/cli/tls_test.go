package cli_test

import (
	"bytes"
	"context"
	"net"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/soulstack/soulstack/internal/cli"
	"github.com/soulstack/soulstack/internal/config"
	"github.com/soulstack/soulstack/internal/keepertest"
)

// TestTrustKeeperCA: against a keeper that listens off loopback (0.0.0.0,
// reached through 127.0.0.1) with its own CA, soulctl refuses the unknown
// certificate, names the options that fix it, and works with --ca-file,
// SOULSTACK_CA, --ca-fingerprint or SOULSTACK_CA_FINGERPRINT.
func TestTrustKeeperCA(t *testing.T) {
	t.Parallel()
	k := keepertest.Start(t, func(c *config.Config) { c.Listen = "0.0.0.0:0" })
	c, logs := k.Config, k.Logs
	var addr net.Addr = k.Addr
	url := "https://127.0.0.1:" + strconv.Itoa(addr.(*net.TCPAddr).Port)
	m := regexp.MustCompile(`ca_fingerprint=(sha256:[0-9a-f]{64})`).FindStringSubmatch(logs.String())
	if m == nil {
		t.Fatalf("no fingerprint in the keeper log:\n%s", logs.String())
	}
	caFile := filepath.Join(c.TLSDir(), "ca.crt")
	token := k.Token

	soulctl := func(env map[string]string, args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := cli.Run(context.Background(), append([]string{"--keeper", url, "--token", token}, args...), cli.Env{
			Stdout: &stdout, Stderr: &stderr, Getenv: func(k string) string { return env[k] },
		})
		return code, stdout.String(), stderr.String()
	}
	code, _, stderr := soulctl(nil, "provider", "list")
	if code != cli.ExitUnreachable || !strings.Contains(stderr, "does not trust") || !strings.Contains(stderr, "--ca-file") ||
		!strings.Contains(stderr, "--ca-fingerprint") || !strings.Contains(stderr, "presented CA "+m[1]) {
		t.Fatalf("soulctl without the CA: exit %d\n%s", code, stderr)
	}
	code, _, stderr = soulctl(nil, "--ca-fingerprint", "sha256:"+strings.Repeat("00", 32), "provider", "list")
	if code != cli.ExitUnreachable || !strings.Contains(stderr, "pinned fingerprint") {
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
