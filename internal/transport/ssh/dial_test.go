package ssh_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/sshtest"
	"github.com/soulstack/soulstack/internal/transport/ssh"
)

func TestTrustOnFirstUseThenPinned(t *testing.T) {
	t.Parallel()
	s := sshtest.Start(t, sshtest.Options{})

	var reported []string
	opts := ssh.Options{OnNewHostKey: func(_ context.Context, tg ssh.Target, key string) error {
		if tg.Addr() != s.HostPort() {
			t.Errorf("reported target %s, want %s", tg.Addr(), s.HostPort())
		}
		reported = append(reported, key)
		return nil
	}}
	c, err := ssh.Dial(t.Context(), target(s), opts)
	if err != nil {
		t.Fatalf("first dial: %v", err)
	}
	c.Close()
	if len(reported) != 1 || reported[0] != s.HostKey {
		t.Fatalf("reported host keys %q, want [%q]", reported, s.HostKey)
	}
	if c.HostKey() != s.HostKey {
		t.Errorf("HostKey() = %q, want %q", c.HostKey(), s.HostKey)
	}

	pinned := target(s)
	pinned.HostKey = reported[0] + " pinned-by-test"
	c, err = ssh.Dial(t.Context(), pinned, opts)
	if err != nil {
		t.Fatalf("dial with pinned key: %v", err)
	}
	defer c.Close()
	if len(reported) != 1 {
		t.Errorf("a pinned key was reported again: %q", reported)
	}
	if res := exec(t, c, ssh.Command{Argv: []string{"true"}}); res.ExitCode != 0 {
		t.Errorf("true exited %d", res.ExitCode)
	}
}

func TestOnNewHostKeyErrorFailsTheConnection(t *testing.T) {
	t.Parallel()
	s := sshtest.Start(t, sshtest.Options{})
	boom := errors.New("registry down")
	_, err := ssh.Dial(t.Context(), target(s), ssh.Options{
		OnNewHostKey: func(context.Context, ssh.Target, string) error { return boom },
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want %v", err, boom)
	}
}

func TestChangedHostKeyIsRefused(t *testing.T) {
	t.Parallel()
	old := sshtest.Start(t, sshtest.Options{})
	old.Stop()
	// Same place, same authorized key, new host key.
	s := sshtest.Start(t, sshtest.Options{Port: old.Port, ClientKey: old.ClientKey})

	tg := target(s)
	tg.HostKey = old.HostKey
	var dials dialCounter
	rec := &sleepRecorder{}
	_, err := ssh.Dial(t.Context(), tg, ssh.Options{DialContext: dials.dial, Sleep: rec.sleep})
	if !errors.Is(err, ssh.ErrHostKeyMismatch) {
		t.Fatalf("err = %v, want ErrHostKeyMismatch", err)
	}
	if got := ssh.Code(err); got != "ssh.host_key_mismatch" {
		t.Errorf("Code = %q", got)
	}
	var mm *ssh.HostKeyMismatchError
	if !errors.As(err, &mm) {
		t.Fatalf("no HostKeyMismatchError in %v", err)
	}
	if mm.PresentedKey != s.HostKey {
		t.Errorf("PresentedKey = %q, want %q", mm.PresentedKey, s.HostKey)
	}
	if !strings.HasPrefix(mm.Pinned, "SHA256:") || mm.Pinned == mm.Presented {
		t.Errorf("fingerprints pinned %q presented %q", mm.Pinned, mm.Presented)
	}
	if dials.count() != 1 || len(rec.recorded()) != 0 {
		t.Errorf("a host key mismatch was retried: %d dials, sleeps %v", dials.count(), rec.recorded())
	}
}

func TestUnreachableAfterRetries(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close() // nothing listens there now

	key, _, err := sshtest.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	var dials dialCounter
	rec := &sleepRecorder{}
	tg := ssh.Target{
		Address: "127.0.0.1", Port: port, User: "root", PrivateKey: key,
		Retry: ssh.RetryPolicy{Attempts: 4, Interval: 7 * time.Second},
	}
	_, err = ssh.Dial(t.Context(), tg, ssh.Options{DialContext: dials.dial, Sleep: rec.sleep})
	if !errors.Is(err, ssh.ErrUnreachable) {
		t.Fatalf("err = %v, want ErrUnreachable", err)
	}
	if got := ssh.Code(err); got != "ssh.unreachable" {
		t.Errorf("Code = %q", got)
	}
	var ce *ssh.ConnectError
	if !errors.As(err, &ce) || ce.Attempts != 4 {
		t.Errorf("ConnectError %+v, want 4 attempts", ce)
	}
	if dials.count() != 4 {
		t.Errorf("%d dials, want 4", dials.count())
	}
	want := []time.Duration{7 * time.Second, 7 * time.Second, 7 * time.Second}
	if got := rec.recorded(); !slices.Equal(got, want) {
		t.Errorf("sleeps %v, want %v", got, want)
	}
	if strings.Contains(err.Error(), string(key)) || strings.Contains(err.Error(), "PRIVATE KEY") {
		t.Errorf("error shows key material: %v", err)
	}
}

func TestDefaultRetryPolicy(t *testing.T) {
	t.Parallel()
	tg := ssh.Target{}.WithDefaults()
	if tg.Retry.Attempts != 3 || tg.Retry.Interval != 10*time.Second || tg.Port != 22 {
		t.Errorf("defaults: %+v", tg)
	}
}

func TestRetryReachesAHostThatBootsLate(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	key, _, err := sshtest.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	var s *sshtest.Server
	rec := &sleepRecorder{}
	rec.hook = func() {
		if s == nil { // the "VM" finishes booting during the first wait
			s = sshtest.Start(t, sshtest.Options{Port: port, ClientKey: key})
		}
	}
	tg := ssh.Target{Address: "127.0.0.1", Port: port, User: currentUser(t), PrivateKey: key,
		Retry: ssh.RetryPolicy{Attempts: 3, Interval: time.Second}}
	c, err := ssh.Dial(t.Context(), tg, ssh.Options{Sleep: rec.sleep})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	c.Close()
	if n := len(rec.recorded()); n != 1 {
		t.Errorf("%d waits, want 1", n)
	}
}

func TestWrongKeyIsAuthFailureWithoutRetry(t *testing.T) {
	t.Parallel()
	s := sshtest.Start(t, sshtest.Options{})
	other, _, err := sshtest.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	tg := target(s)
	tg.PrivateKey = other
	var dials dialCounter
	rec := &sleepRecorder{}
	_, err = ssh.Dial(t.Context(), tg, ssh.Options{DialContext: dials.dial, Sleep: rec.sleep})
	if !errors.Is(err, ssh.ErrAuth) {
		t.Fatalf("err = %v, want ErrAuth", err)
	}
	if got := ssh.Code(err); got != "ssh.auth_failed" {
		t.Errorf("Code = %q", got)
	}
	if dials.count() != 1 || len(rec.recorded()) != 0 {
		t.Errorf("auth failure retried: %d dials, sleeps %v", dials.count(), rec.recorded())
	}
	if strings.Contains(err.Error(), string(other)) {
		t.Errorf("error shows key material: %v", err)
	}
}

func TestInvalidTargets(t *testing.T) {
	t.Parallel()
	key, _, err := sshtest.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	valid := ssh.Target{Address: "127.0.0.1", User: "root", PrivateKey: key}
	tests := []struct {
		name   string
		modify func(*ssh.Target)
		want   string
	}{
		{"no address", func(t *ssh.Target) { t.Address = "" }, "address is empty"},
		{"no user", func(t *ssh.Target) { t.User = "" }, "user is empty"},
		{"no key", func(t *ssh.Target) { t.PrivateKey = nil }, "private key is empty"},
		{"garbage key", func(t *ssh.Target) {
			t.PrivateKey = []byte("-----BEGIN OPENSSH PRIVATE KEY-----\nc2VjcmV0\n-----END OPENSSH PRIVATE KEY-----\n")
		}, "private key does not parse"},
		{"bad pin", func(t *ssh.Target) { t.HostKey = "ssh-ed25519 not-base64" }, "pinned host key does not parse"},
		{"bad port", func(t *ssh.Target) { t.Port = 70000 }, "port 70000 out of range"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tg := valid
			tt.modify(&tg)
			_, err := ssh.Dial(t.Context(), tg, ssh.Options{})
			if !errors.Is(err, ssh.ErrInvalidTarget) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want ErrInvalidTarget saying %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "c2VjcmV0") {
				t.Errorf("error shows key material: %v", err)
			}
		})
	}
	if err := valid.Validate(); err != nil {
		t.Errorf("valid target: %v", err)
	}
}

func TestDialHonoursContext(t *testing.T) {
	t.Parallel()
	key, _, err := sshtest.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	tg := ssh.Target{Address: "127.0.0.1", Port: 1, User: "root", PrivateKey: key}
	_, err = ssh.Dial(ctx, tg, ssh.Options{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestKeyExchangePrefersCurve25519(t *testing.T) {
	t.Parallel()
	s := sshtest.Start(t, sshtest.Options{Config: []string{"LogLevel DEBUG1"}})
	connect(t, s, ssh.Options{}).Close()
	if !strings.Contains(s.Log(), "kex: algorithm: curve25519-sha256") {
		t.Errorf("sshd did not negotiate curve25519-sha256:\n%s", s.Log())
	}
}

// TestRetryAuthWaitsForTheKey: a VM whose cloud-init writes the
// authorized key after sshd answers refuses the key at first; with
// RetryAuth the dial tries again and gets in once the key is there, and
// without the key ever appearing it is still an auth failure, after the
// policy's attempts.
func TestRetryAuthWaitsForTheKey(t *testing.T) {
	t.Parallel()
	late, latePub, err := sshtest.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	t.Run("key written late", func(t *testing.T) {
		t.Parallel()
		s := sshtest.Start(t, sshtest.Options{})
		rec := &sleepRecorder{}
		rec.hook = func() { // cloud-init writes the key during the first wait
			f, err := os.OpenFile(filepath.Join(s.Dir, "authorized_keys"), os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Error(err)
				return
			}
			defer f.Close()
			if _, err := f.WriteString(latePub + "\n"); err != nil {
				t.Error(err)
			}
		}
		tg := target(s)
		tg.PrivateKey, tg.RetryAuth = late, true
		tg.Retry = ssh.RetryPolicy{Attempts: 3, Interval: time.Second}
		c, err := ssh.Dial(t.Context(), tg, ssh.Options{Sleep: rec.sleep})
		if err != nil {
			t.Fatalf("dial with RetryAuth once the key is written: %v", err)
		}
		c.Close()
		if n := len(rec.recorded()); n != 1 {
			t.Errorf("%d waits, want 1", n)
		}
	})
	t.Run("key never written", func(t *testing.T) {
		t.Parallel()
		s := sshtest.Start(t, sshtest.Options{})
		var dials dialCounter
		rec := &sleepRecorder{}
		tg := target(s)
		tg.PrivateKey, tg.RetryAuth = late, true
		tg.Retry = ssh.RetryPolicy{Attempts: 3, Interval: time.Second}
		_, err := ssh.Dial(t.Context(), tg, ssh.Options{DialContext: dials.dial, Sleep: rec.sleep})
		var ce *ssh.ConnectError
		if !errors.Is(err, ssh.ErrAuth) || !errors.As(err, &ce) || ce.Attempts != 3 {
			t.Fatalf("err = %v (%+v), want ErrAuth after 3 attempts", err, ce)
		}
		if dials.count() != 3 || len(rec.recorded()) != 2 {
			t.Errorf("%d dials and sleeps %v, want 3 and 2", dials.count(), rec.recorded())
		}
	})
}
