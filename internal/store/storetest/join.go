package storetest

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/store/sqlstore"
	"github.com/soulstack/soulstack/internal/testdb"
)

const (
	joinKeyEd  = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJoinEd25519KeyForTheStoreSuite root@vm"
	joinKeyRSA = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQJoinRSA root@vm"
)

// provisionJoin makes two pending cloud souls with tokens hash-a and
// hash-b (one hour to live) and a seed on the first.
func provisionJoin(t *testing.T, s *sqlstore.Store) {
	t.Helper()
	mustProvider(t, s, "local")
	if err := s.CloudRequestCreate(ctx, store.CloudRequest{RequestID: "req_j", RunID: "run_j", Step: "make", Provider: "local", Count: 2}); err != nil {
		t.Fatal(err)
	}
	souls, tokens := cloudSouls()
	seeds := []store.SoulSeed{{SID: "vm-1.local.test", Scenario: "steps: []\n", Input: json.RawMessage(`{"pkg":"curl"}`), CreatedBy: "tok_creator"}}
	if err := s.CloudProvision(ctx, store.CloudProvisionParams{RequestID: "req_j", Souls: souls, Tokens: tokens, Seeds: seeds, Actor: "tok_creator"}); err != nil {
		t.Fatal(err)
	}
}

func joinParams(sid, hash string) store.SoulJoinParams {
	return store.SoulJoinParams{SID: sid, TokenHash: hash, Now: time.Now(), CertSerial: "abc123", CertNotAfter: time.Now().Add(24 * time.Hour),
		HostKeys: []string{joinKeyRSA, joinKeyEd}, HostKey: joinKeyEd}
}

// snapshot is what a refused join must leave alone.
func joinSnapshot(t *testing.T, s store.Store) string {
	t.Helper()
	var out []any
	for _, sid := range []string{"vm-1.local.test", "vm-2.local.test"} {
		so, err := s.SoulGet(ctx, sid)
		if err != nil {
			t.Fatal(err)
		}
		toks, _ := s.BootstrapTokens(ctx, sid)
		so.UpdatedAt = time.Time{}
		out = append(out, so, toks)
	}
	b, _ := json.Marshal(out)
	return string(b)
}

func wantRefused(t *testing.T, err error, reason string) {
	t.Helper()
	var re *store.JoinRefusedError
	if !errors.As(err, &re) || re.Reason != reason {
		t.Fatalf("err = %v; want a refusal %s", err, reason)
	}
}

func testSoulJoin(t *testing.T, b testdb.Backend) {
	s := b.Open(t)
	provisionJoin(t, s)
	seeds, err := s.Seeds(ctx, "vm-1.local.test")
	if err != nil || len(seeds) != 1 || seeds[0].Status != store.SeedActive || seeds[0].CreatedBy != "tok_creator" || string(seeds[0].Input) == "" || seeds[0].ID == 0 {
		t.Fatalf("seeds = %+v, %v", seeds, err)
	}
	var in map[string]any
	if err := json.Unmarshal(seeds[0].Input, &in); err != nil || in["pkg"] != "curl" {
		t.Fatalf("seed input = %s, %v", seeds[0].Input, err)
	}
	before := joinSnapshot(t, s)
	expired := joinParams("vm-1.local.test", "hash-a")
	expired.Now = time.Now().Add(2 * time.Hour)
	for name, tc := range map[string]struct {
		p      store.SoulJoinParams
		reason string
	}{
		"unknown":  {joinParams("vm-1.local.test", "hash-z"), store.JoinTokenUnknown},
		"wrongSID": {joinParams("vm-1.local.test", "hash-b"), store.JoinSIDMismatch},
		"expired":  {expired, store.JoinTokenExpired},
	} {
		_, err := s.SoulJoin(ctx, tc.p)
		if err == nil {
			t.Fatalf("%s: join accepted", name)
		}
		wantRefused(t, err, tc.reason)
	}
	if after := joinSnapshot(t, s); after != before {
		t.Fatalf("refused joins changed the registry:\n%s\n%s", before, after)
	}

	so, err := s.SoulJoin(ctx, joinParams("vm-1.local.test", "hash-a"))
	if err != nil {
		t.Fatal(err)
	}
	if so.Status != store.SoulActive || so.CertSerial != "abc123" || so.CertNotAfter == nil || so.JoinedAt == nil || so.Connection.HostKey != joinKeyEd {
		t.Fatalf("joined soul = %+v", so)
	}
	toks, _ := s.BootstrapTokens(ctx, "vm-1.local.test")
	if len(toks) != 1 || toks[0].Status != store.BootstrapUsed {
		t.Fatalf("token after join = %+v", toks)
	}
	listed, _ := s.SoulList(ctx, store.ListParams{Limit: 10})
	if len(listed) != 2 || listed[0].CertSerial != "abc123" || listed[0].JoinedAt == nil {
		t.Fatalf("listed = %+v", listed)
	}
	// A replay is refused and changes nothing.
	before = joinSnapshot(t, s)
	_, err = s.SoulJoin(ctx, joinParams("vm-1.local.test", "hash-a"))
	wantRefused(t, err, store.JoinTokenUsed)
	if after := joinSnapshot(t, s); after != before {
		t.Fatal("a replayed join changed the registry")
	}

	// Renewal: the current serial renews, the old one no longer does.
	so, err = s.SoulRenewCert(ctx, store.SoulRenewParams{SID: "vm-1.local.test", OldSerial: "abc123", CertSerial: "def456", CertNotAfter: time.Now().Add(48 * time.Hour)})
	if err != nil || so.CertSerial != "def456" {
		t.Fatalf("renew = %+v, %v", so, err)
	}
	_, err = s.SoulRenewCert(ctx, store.SoulRenewParams{SID: "vm-1.local.test", OldSerial: "abc123", CertSerial: "fff", CertNotAfter: time.Now()})
	wantRefused(t, err, store.JoinCertRevoked)
	_, err = s.SoulRenewCert(ctx, store.SoulRenewParams{SID: "nobody.local.test", OldSerial: "abc123", CertSerial: "fff", CertNotAfter: time.Now()})
	wantRefused(t, err, store.JoinSoulNotFound)

	// Destroy clears the serial (revocation), burns the second token and
	// orphans the seed; the burned token is refused as such.
	if _, err := s.CloudDestroy(ctx, store.CloudDestroyParams{Provider: "local", VMIDs: []string{"vm-1", "vm-2"}, SIDs: []string{"vm-1.local.test", "vm-2.local.test"}, Destroyed: []string{"vm-1", "vm-2"}, Actor: "tok_creator"}); err != nil {
		t.Fatal(err)
	}
	so, _ = s.SoulGet(ctx, "vm-1.local.test")
	if so.Status != store.SoulDestroyed || so.CertSerial != "" {
		t.Fatalf("destroyed soul = %+v", so)
	}
	_, err = s.SoulRenewCert(ctx, store.SoulRenewParams{SID: "vm-1.local.test", OldSerial: "def456", CertSerial: "fff", CertNotAfter: time.Now()})
	wantRefused(t, err, store.JoinSoulDestroyed)
	_, err = s.SoulJoin(ctx, joinParams("vm-2.local.test", "hash-b"))
	wantRefused(t, err, store.JoinTokenBurned)
	seeds, _ = s.Seeds(ctx, "vm-1.local.test")
	if len(seeds) != 1 || seeds[0].Status != store.SeedOrphaned {
		t.Fatalf("seeds after destroy = %+v", seeds)
	}
	var joined, renewed int
	if err := s.DB().QueryRow(`SELECT COUNT(*) FROM audit_events WHERE action = 'soul.joined'`).Scan(&joined); err != nil {
		t.Fatal(err)
	}
	if err := s.DB().QueryRow(`SELECT COUNT(*) FROM audit_events WHERE action = 'soul.cert_renewed'`).Scan(&renewed); err != nil {
		t.Fatal(err)
	}
	if joined != 1 || renewed != 1 {
		t.Fatalf("audit: %d soul.joined, %d soul.cert_renewed; want 1 and 1", joined, renewed)
	}
}

// testSoulJoinPinned: a soul whose host key is pinned already joins only
// with that key among the reported ones, and keeps it.
func testSoulJoinPinned(t *testing.T, b testdb.Backend) {
	s := b.Open(t)
	provisionJoin(t, s)
	if err := s.SoulPinHostKey(ctx, store.SoulHostKeyParams{SID: "vm-1.local.test", HostKey: joinKeyRSA, Actor: store.ActorKeeper}); err != nil {
		t.Fatal(err)
	}
	p := joinParams("vm-1.local.test", "hash-a")
	p.HostKeys, p.HostKey = []string{joinKeyEd}, joinKeyEd
	_, err := s.SoulJoin(ctx, p)
	wantRefused(t, err, store.JoinHostKeyMismatch)
	so, err := s.SoulJoin(ctx, joinParams("vm-1.local.test", "hash-a"))
	if err != nil || so.Connection.HostKey != joinKeyRSA {
		t.Fatalf("join with the pinned key among others = %+v, %v", so, err)
	}
}

// testSoulJoinConcurrent: of two joins with one token at once, exactly
// one succeeds.
func testSoulJoinConcurrent(t *testing.T, b testdb.Backend) {
	s := b.Open(t)
	provisionJoin(t, s)
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := s.SoulJoin(ctx, joinParams("vm-1.local.test", "hash-a"))
			errs <- err
		}()
	}
	var ok int
	for range 2 {
		if err := <-errs; err == nil {
			ok++
		} else {
			wantRefused(t, err, store.JoinTokenUsed)
		}
	}
	if ok != 1 {
		t.Fatalf("%d concurrent joins with one token succeeded; want 1", ok)
	}
}

func testSeedAdd(t *testing.T, b testdb.Backend) {
	s := b.Open(t)
	provisionJoin(t, s)
	sd, err := s.SeedAdd(ctx, store.SeedAddParams{Seed: store.SoulSeed{SID: "vm-2.local.test", Scenario: "steps: []\n", Input: json.RawMessage(`{}`), CreatedBy: "tok_x"}, Actor: "tok_x"})
	if err != nil || sd.ID == 0 || sd.Status != store.SeedActive || sd.CreatedBy != "tok_x" || sd.CreatedAt.IsZero() {
		t.Fatalf("seed = %+v, %v", sd, err)
	}
	_, err = s.SeedAdd(ctx, store.SeedAddParams{Seed: store.SoulSeed{SID: "nobody.local.test", Scenario: "steps: []\n"}, Actor: "tok_x"})
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("seed of an unknown soul: %v", err)
	}
	var n int
	if err := s.DB().QueryRow(`SELECT COUNT(*) FROM audit_events WHERE action = 'seed.added'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("seed.added events = %d, %v", n, err)
	}
}
