package engine

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/module"
	"github.com/soulstack/soulstack/internal/sshtest"
	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/store/sqlstore"
	"github.com/soulstack/soulstack/internal/testdb"
	"github.com/soulstack/soulstack/internal/transport/ssh"
)

// TestSoulsTargetAwaitsJoin, on real sshd servers: a soul that joins by
// itself (AwaitJoin) is not dialled, and no key is trusted on first
// contact, until its join pins the host key; then the connection is
// verified against that key: the server's own key connects, a pin of
// another key is refused with ssh.host_key_mismatch. A soul that never
// joins fails with soul.join_pending and keeps no pinned key.
func TestSoulsTargetAwaitsJoin(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := testdb.SQLite.Open(t, sqlstore.WithClock(time.Now))
	if _, err := st.ProviderCreate(ctx, store.ProviderCreateParams{Provider: store.Provider{Name: "acme", Driver: "fake", FQDNSuffix: "acme.test", Config: json.RawMessage(`{}`)}, Actor: "tok_t"}); err != nil {
		t.Fatal(err)
	}
	srv := sshtest.Start(t, sshtest.Options{})
	other := sshtest.Start(t, sshtest.Options{})
	for _, sid := range []string{"good.acme.test", "wrong.acme.test", "never.acme.test"} {
		so := store.Soul{SID: sid, Provider: "acme", VMID: "i-" + sid, Status: store.SoulActive, Address: "127.0.0.1",
			Connection: store.Connection{Transport: "ssh", User: srv.User, Port: srv.Port, AwaitJoin: true}}
		if _, err := st.SoulCreate(ctx, store.SoulCreateParams{Soul: so, Actor: "tok_t"}); err != nil {
			t.Fatal(err)
		}
	}
	s := NewSouls(SoulsConfig{Store: st, KeeperKey: srv.ClientKey, ReadyTimeout: 2 * time.Second, Dial: testSSH(t, ssh.Options{})})

	// The joins happen while the targets wait.
	pinned := make(chan error, 2)
	go func() {
		time.Sleep(3 * joinPoll)
		pinned <- st.SoulPinHostKey(ctx, store.SoulHostKeyParams{SID: "good.acme.test", HostKey: srv.HostKey, Actor: store.ActorKeeper})
		pinned <- st.SoulPinHostKey(ctx, store.SoulHostKeyParams{SID: "wrong.acme.test", HostKey: other.HostKey, Actor: store.ActorKeeper})
	}()
	if _, err := s.Target(ctx, "good.acme.test", ssh.RetryPolicy{}, false, ""); err != nil {
		t.Fatalf("target after its join pinned the key: %v", err)
	}
	if err := <-pinned; err != nil {
		t.Fatal(err)
	}
	if err := <-pinned; err != nil {
		t.Fatal(err)
	}
	if _, err := s.Target(ctx, "wrong.acme.test", ssh.RetryPolicy{}, false, ""); !errors.Is(err, ssh.ErrHostKeyMismatch) {
		t.Fatalf("target whose join pinned another key: %v; want ssh.host_key_mismatch", err)
	}
	_, err := s.Target(ctx, "never.acme.test", ssh.RetryPolicy{}, false, "")
	if module.Code(err) != CodeJoinPending {
		t.Fatalf("target that never joins: %v; want %s", err, CodeJoinPending)
	}
	if so, _ := st.SoulGet(ctx, "never.acme.test"); so.Connection.HostKey != "" {
		t.Fatalf("a soul that never joined got a key pinned on first contact: %q", so.Connection.HostKey)
	}
}
