package keeper_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/soulstack/soulstack/internal/pki"
	"github.com/soulstack/soulstack/internal/soulid"
)

// keeperLog accumulates a keeper process's log (proc.drain hands each
// line out once).
type keeperLog struct {
	mu sync.Mutex
	k  *proc
	b  strings.Builder
}

func (l *keeperLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.WriteString(l.k.Drain())
	return l.b.String()
}

// pinnedConn connects to the bus as id's current certificate, kept
// for the life of the connection (a renewal does not change it), without
// reconnecting; closed is closed when the server ends it.
func pinnedConn(t *testing.T, urls []string, id *soulid.Identity) (nc *nats.Conn, closed chan struct{}, serial string) {
	t.Helper()
	tc := id.TLSConfig()
	cert, err := tc.GetClientCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
	closed = make(chan struct{})
	nc, err = nats.Connect(strings.Join(urls, ","), nats.Secure(tc), nats.NoReconnect(), nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
	if err != nil {
		t.Fatalf("soul %s cannot connect to the bus: %v", id.State().SID, err)
	}
	t.Cleanup(nc.Close)
	return nc, closed, pki.SerialHex(id.Certificate())
}

// TestIdentityChangesRevokeAtOnce: against a real keeper (its own
// process, SQLite) whose bus heartbeat is 5 s — the revalidation sweep
// every 30 s — with joined souls on real local VMs, a certificate
// renewal closes the old certificate's bus connection, the destroy
// cascade closes the destroyed soul's, and an API delete the deleted
// soul's, each by the keeper that made the change ("by=registry
// change") before the sweep ever ran (no "by=sweep" in its log), while
// the renewed certificate and the other souls' connections stay up.
func TestIdentityChangesRevokeAtOnce(t *testing.T) {
	requireLocalVMs(t)
	t.Parallel()
	soul := buildSoul(t, t.TempDir())
	j := startJoinKeeper(t, "sqlite", 3, "nats: {heartbeat: 5s}\n")
	log := &keeperLog{k: j.k}
	ctx := context.Background()
	ids := map[string]*soulid.Identity{}
	for _, sid := range j.sids {
		state := t.TempDir()
		if out, err := soulJoin(t, soul, "--keeper", j.agent, "--token", j.tokens[sid], "--sid", sid, "--ca-fingerprint", j.fp, "--state-dir", state, "--host-key-dir", pinnedKeyDir(t, j.c, sid)); err != nil {
			t.Fatalf("soul join: %v\n%s", err, out)
		}
		id, err := soulid.Load(state)
		if err != nil {
			t.Fatal(err)
		}
		ids[sid] = id
	}
	// The bus URLs the join answer gave the souls name the VMs' gateway;
	// from the host the same port is on loopback.
	var urls []string
	for _, u := range ids[j.sids[0]].State().NATSURLs {
		urls = append(urls, strings.Replace(u, "soulstack-local-gateway", "127.0.0.1", 1))
	}
	if len(urls) == 0 {
		t.Fatal("the join answer gave no bus URLs")
	}
	renewed, destroyed, deleted := j.sids[0], j.sids[1], j.sids[2]
	revokedAtOnce := func(t *testing.T, sid, serial string, closed chan struct{}) {
		t.Helper()
		// The change's call has returned: the connection is closing or
		// closed, not waiting for a sweep 30 s away.
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
			t.Fatalf("the connection of %s (serial %s) is still open after the change", sid, serial)
		}
		line := regexp.MustCompile(`msg="bus: soul identity revoked" component=bus sid=` + regexp.QuoteMeta(sid) + ` serial=` + serial + ` by="registry change" connections_closed=1`)
		// The bus closes the connection, then logs why: give the line the
		// moment it takes to be written.
		deadline := time.Now().Add(5 * time.Second)
		for !line.MatchString(log.String()) {
			if time.Now().After(deadline) {
				t.Fatalf("the keeper did not revoke %s/%s on the change itself:\n%s", sid, serial, log.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	t.Run("Renewal", func(t *testing.T) {
		old, closed, oldSerial := pinnedConn(t, urls, ids[renewed])
		if err := ids[renewed].Renew(ctx); err != nil {
			t.Fatal(err)
		}
		revokedAtOnce(t, renewed, oldSerial, closed)
		if old.IsConnected() {
			t.Fatal("the superseded certificate's connection is still connected")
		}
		// The new certificate connects, the old one no longer does.
		fresh, freshClosed, newSerial := pinnedConn(t, urls, ids[renewed])
		if newSerial == oldSerial || !fresh.IsConnected() {
			t.Fatalf("the renewed identity (serial %s, old %s) is not connected", newSerial, oldSerial)
		}
		select {
		case <-freshClosed:
			t.Fatal("the renewed certificate's connection was closed")
		default:
		}
	})
	t.Run("Destroy", func(t *testing.T) {
		survivor, survivorClosed, _ := pinnedConn(t, urls, ids[deleted])
		_, closed, serial := pinnedConn(t, urls, ids[destroyed])
		run, _ := cloudStep(t, j.c, "core.cloud.destroyed", fmt.Sprintf("{provider: local, vm_ids: [%s], sids: [%s]}", j.vmIDs[destroyed], destroyed))
		if stepStatus(run) != "Succeeded changed" {
			t.Fatalf("destroy: %s", stepStatus(run))
		}
		revokedAtOnce(t, destroyed, serial, closed)
		select {
		case <-survivorClosed:
			t.Fatal("the destroy cut off a soul it did not destroy")
		default:
		}
		if !survivor.IsConnected() {
			t.Fatal("the other soul's connection dropped")
		}
		survivor.Close()
	})
	t.Run("Delete", func(t *testing.T) {
		_, closed, serial := pinnedConn(t, urls, ids[deleted])
		if err := j.c.SoulDelete(ctx, deleted); err != nil {
			t.Fatal(err)
		}
		revokedAtOnce(t, deleted, serial, closed)
	})
	if strings.Contains(log.String(), `by=sweep`) {
		t.Fatalf("a revalidation sweep revoked a soul: the test no longer shows the immediate path\n%s", log.String())
	}
}
