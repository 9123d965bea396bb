package engine

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/sshtest"
	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/store/sqlstore"
	"github.com/soulstack/soulstack/internal/testdb"
	"github.com/soulstack/soulstack/internal/transport/ssh"
)

// TestSoulsTargetWaitsForTheKey, on real sshd servers: a cloud-made soul
// never reached is dialled with ssh.ReadyConnectRetry and its key refusals
// retried (its cloud-init writes the key during the first wait), then the
// readiness probe runs on the host (which has no cloud-init: ready) and
// counts as the contact; a hand-registered active soul with the same
// late key fails at once with ssh.auth_failed, without a wait or a probe.
func TestSoulsTargetWaitsForTheKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := testdb.SQLite.Open(t, sqlstore.WithClock(time.Now))
	if _, err := st.ProviderCreate(ctx, store.ProviderCreateParams{Provider: store.Provider{Name: "acme", Driver: "fake", FQDNSuffix: "acme.test", Config: json.RawMessage(`{}`)}, Actor: "tok_t"}); err != nil {
		t.Fatal(err)
	}
	keeperKey, keeperPub, err := sshtest.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	cloudSrv := sshtest.Start(t, sshtest.Options{})
	handSrv := sshtest.Start(t, sshtest.Options{})
	souls := []store.Soul{
		{SID: "vm-1.acme.test", Provider: "acme", VMID: "i-1", Status: store.SoulPending, Address: "127.0.0.1",
			Connection: store.Connection{Transport: "ssh", User: cloudSrv.User, Port: cloudSrv.Port}},
		{SID: "db.example.test", Status: store.SoulActive, Address: "127.0.0.1",
			Connection: store.Connection{Transport: "ssh", User: handSrv.User, Port: handSrv.Port}},
	}
	for _, so := range souls {
		if _, err := st.SoulCreate(ctx, store.SoulCreateParams{Soul: so, Actor: "tok_t"}); err != nil {
			t.Fatal(err)
		}
	}
	var sleeps []time.Duration
	sleep := func(ctx context.Context, d time.Duration) error {
		sleeps = append(sleeps, d)
		// The cloud VM's cloud-init writes the keeper's key now.
		f, err := os.OpenFile(filepath.Join(cloudSrv.Dir, "authorized_keys"), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = f.WriteString(keeperPub + "\n")
		return err
	}
	s := NewSouls(SoulsConfig{Store: st, KeeperKey: keeperKey, Dial: testSSH(t, ssh.Options{Sleep: sleep})})

	tg, err := s.Target(ctx, "vm-1.acme.test", ssh.RetryPolicy{}, false, "")
	if err != nil {
		t.Fatalf("target a cloud-made soul whose key comes late: %v", err)
	}
	if len(sleeps) != 1 || sleeps[0] != ssh.ReadyConnectRetry.Interval {
		t.Errorf("waits = %v, want one of %s", sleeps, ssh.ReadyConnectRetry.Interval)
	}
	if !tg.(*soulTarget).ran.Load() || !s.ready["vm-1.acme.test"] {
		t.Errorf("the readiness probe did not run as the soul's first contact")
	}

	sleeps = nil
	_, err = s.Target(ctx, "db.example.test", ssh.RetryPolicy{}, false, "")
	if !errors.Is(err, ssh.ErrAuth) || len(sleeps) != 0 {
		t.Fatalf("hand-registered soul with a refused key = %v after waits %v, want ssh.auth_failed at once", err, sleeps)
	}
}
