package storetest

import (
	"context"
	"database/sql"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/audit"
	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/testdb"
)

// contactEvents returns the soul.activated and soul.unreachable events.
func contactEvents(t *testing.T, s store.Store) []audit.Event {
	t.Helper()
	all, err := s.AuditList(ctx, store.AuditListParams{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var out []audit.Event
	for _, e := range all {
		if e.Action == "soul.activated" || e.Action == "soul.unreachable" {
			out = append(out, e)
		}
	}
	return out
}

func mustStatus(t *testing.T, s store.Store, sid, want string) store.Soul {
	t.Helper()
	so, err := s.SoulGet(ctx, sid)
	if err != nil {
		t.Fatal(err)
	}
	if so.Status != want {
		t.Fatalf("soul %s is %s, want %s", sid, so.Status, want)
	}
	return so
}

// testSoulContact: a soul comes alive on contact, goes unreachable when a
// step cannot reach it and comes back on the next success; each change is
// audited once, and contacts that change no status write no audit event.
func testSoulContact(t *testing.T, b testdb.Backend) {
	s := b.Open(t)
	for _, so := range []store.Soul{
		{SID: "hand.example.com", Address: "127.0.0.2"},                            // hand-registered: active
		{SID: "vm-1.local.test", Address: "10.0.0.2", Status: store.SoulPending},   // what core.cloud.created makes
		{SID: "gone.local.test", Address: "10.0.0.3", Status: store.SoulDestroyed}, // destroyed by the cascade
	} {
		so.Connection = store.Connection{Transport: "ssh", User: "root", Port: 22}
		if _, err := s.SoulCreate(ctx, store.SoulCreateParams{Soul: so, Actor: "tok_admin"}); err != nil {
			t.Fatal(err)
		}
	}
	hand := mustStatus(t, s, "hand.example.com", store.SoulActive)
	if hand.LastSeenAt != nil || hand.LastError != "" {
		t.Fatalf("a soul never contacted has last_seen_at %v, last_error %q", hand.LastSeenAt, hand.LastError)
	}

	// First contact: the pending soul becomes active, the active one only
	// has its last contact recorded; destroyed and unknown souls stay.
	trs, err := s.SoulContact(ctx, store.SoulContactParams{Reached: []string{"hand.example.com", "vm-1.local.test", "gone.local.test", "ghost.local.test"}, RunID: "run_1", Actor: "tok_runner"})
	if err != nil {
		t.Fatal(err)
	}
	if len(trs) != 1 || trs[0].SID != "vm-1.local.test" || trs[0].From != store.SoulPending || trs[0].To != store.SoulActive {
		t.Fatalf("transitions = %+v, want only vm-1 pending -> active", trs)
	}
	vm := mustStatus(t, s, "vm-1.local.test", store.SoulActive)
	if vm.LastSeenAt == nil || !vm.LastSeenAt.Equal(trs[0].At) || !vm.UpdatedAt.Equal(trs[0].At) {
		t.Fatalf("activated soul: last_seen_at %v, updated_at %v, want both %v", vm.LastSeenAt, vm.UpdatedAt, trs[0].At)
	}
	hand = mustStatus(t, s, "hand.example.com", store.SoulActive)
	if hand.LastSeenAt == nil || hand.LastSeenAt.Before(hand.CreatedAt) {
		t.Fatalf("the active soul's last_seen_at = %v", hand.LastSeenAt)
	}
	if gone := mustStatus(t, s, "gone.local.test", store.SoulDestroyed); gone.LastSeenAt != nil {
		t.Fatalf("a destroyed soul got last_seen_at %v", gone.LastSeenAt)
	}
	evs := contactEvents(t, s)
	if len(evs) != 1 || evs[0].Action != "soul.activated" || evs[0].Object != "soul/vm-1.local.test" || evs[0].ActorAID != "tok_runner" {
		t.Fatalf("contact audit = %+v, want one soul.activated of vm-1 by tok_runner", evs)
	}
	var payload map[string]any
	if err := json.Unmarshal([]byte(evs[0].Payload), &payload); err != nil || payload["run_id"] != "run_1" || payload["from"] != "pending" || payload["to"] != "active" {
		t.Fatalf("soul.activated payload = %s (%v)", evs[0].Payload, err)
	}

	// Reached again: no change, no audit event.
	if trs, err := s.SoulContact(ctx, store.SoulContactParams{Reached: []string{"vm-1.local.test"}, RunID: "run_2", Actor: "tok_runner"}); err != nil || len(trs) != 0 {
		t.Fatalf("second contact: %+v, %v", trs, err)
	}
	if n := len(contactEvents(t, s)); n != 1 {
		t.Fatalf("a contact that changed no status wrote audit events: %d", n)
	}
	seen := *mustStatus(t, s, "vm-1.local.test", store.SoulActive).LastSeenAt

	// Unreachable: status, last_error, last_seen_at kept; audited once.
	lost := store.UnreachableSoul{SID: "vm-1.local.test", Code: "ssh.unreachable", Error: "ssh connect root@10.0.0.2:22: host unreachable after 1 attempt: connection refused"}
	trs, err = s.SoulContact(ctx, store.SoulContactParams{Unreachable: []store.UnreachableSoul{lost, {SID: "gone.local.test", Code: "ssh.unreachable", Error: "x"}}, RunID: "run_3", Actor: "tok_runner"})
	if err != nil || len(trs) != 1 || trs[0].From != store.SoulActive || trs[0].To != store.SoulUnreachable {
		t.Fatalf("unreachable transitions = %+v, %v", trs, err)
	}
	vm = mustStatus(t, s, "vm-1.local.test", store.SoulUnreachable)
	if vm.LastError != lost.Error || vm.LastSeenAt == nil || !vm.LastSeenAt.Equal(seen) {
		t.Fatalf("unreachable soul: last_error %q, last_seen_at %v (want the last contact %v)", vm.LastError, vm.LastSeenAt, seen)
	}
	mustStatus(t, s, "gone.local.test", store.SoulDestroyed)
	// Still unreachable in a later run: nothing written.
	if trs, err := s.SoulContact(ctx, store.SoulContactParams{Unreachable: []store.UnreachableSoul{{SID: "vm-1.local.test", Code: "ssh.unreachable", Error: "another message"}}, RunID: "run_4", Actor: "tok_runner"}); err != nil || len(trs) != 0 {
		t.Fatalf("unreachable again: %+v, %v", trs, err)
	}
	if vm := mustStatus(t, s, "vm-1.local.test", store.SoulUnreachable); vm.LastError != lost.Error || !vm.UpdatedAt.Equal(trs[0].At) {
		t.Fatalf("a soul still unreachable was rewritten: %+v", vm)
	}
	evs = contactEvents(t, s)
	if len(evs) != 2 || evs[1].Action != "soul.unreachable" || !strings.Contains(string(evs[1].Payload), `"code":"ssh.unreachable"`) || !strings.Contains(string(evs[1].Payload), `"run_id":"run_3"`) {
		t.Fatalf("contact audit = %+v", evs)
	}

	recoverContact(t, s, seen)
}

// recoverContact: the unreachable vm-1 is reached again (by another run's
// creator): active again, last_error cleared, audited, and listed so.
func recoverContact(t *testing.T, s store.Store, seen time.Time) {
	t.Helper()
	// Back: active again, last_error cleared.
	trs, err := s.SoulContact(ctx, store.SoulContactParams{Reached: []string{"vm-1.local.test"}, RunID: "run_5", Actor: "tok_other"})
	if err != nil || len(trs) != 1 || trs[0].From != store.SoulUnreachable || trs[0].To != store.SoulActive {
		t.Fatalf("recovery transitions = %+v, %v", trs, err)
	}
	vm := mustStatus(t, s, "vm-1.local.test", store.SoulActive)
	if vm.LastError != "" || !vm.LastSeenAt.After(seen) {
		t.Fatalf("recovered soul: last_error %q, last_seen_at %v", vm.LastError, vm.LastSeenAt)
	}
	evs := contactEvents(t, s)
	if len(evs) != 3 || evs[2].Action != "soul.activated" || evs[2].ActorAID != "tok_other" {
		t.Fatalf("contact audit = %+v", evs)
	}

	list, err := s.SoulList(ctx, store.ListParams{})
	if err != nil || len(list) != 3 {
		t.Fatalf("list = %+v, %v", list, err)
	}
	for _, so := range list {
		if so.SID == "vm-1.local.test" && (so.LastSeenAt == nil || !so.LastSeenAt.Equal(*vm.LastSeenAt)) {
			t.Fatalf("listed soul last_seen_at = %v, want %v", so.LastSeenAt, vm.LastSeenAt)
		}
	}
}

// testSoulExecutor: how a soul's commands ran (SoulContactParams.Executors)
// is recorded as given, with no audit event, the soul's status and update
// time untouched; an unknown soul is no error.
func testSoulExecutor(t *testing.T, b testdb.Backend) {
	s := b.Open(t)
	so := store.Soul{SID: "hand.example.com", Address: "127.0.0.2", Connection: store.Connection{Transport: "ssh", User: "root", Port: 22}}
	if _, err := s.SoulCreate(ctx, store.SoulCreateParams{Soul: so, Actor: "tok_admin"}); err != nil {
		t.Fatal(err)
	}
	before := mustStatus(t, s, "hand.example.com", store.SoulActive)
	events := func() int {
		all, err := s.AuditList(ctx, store.AuditListParams{Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		return len(all)
	}
	audited := events()
	for _, x := range []string{"ssh: executor", "ssh: executor", "ssh: shell (no executor binary for Linux riscv64)"} {
		if trs, err := s.SoulContact(ctx, store.SoulContactParams{Executors: map[string]string{"hand.example.com": x, "ghost.local.test": x}, RunID: "run_6", Actor: "tok_runner"}); err != nil || len(trs) != 0 {
			t.Fatalf("executor %q: %+v, %v", x, trs, err)
		}
		if got := mustStatus(t, s, "hand.example.com", store.SoulActive); got.Executor != x || !got.UpdatedAt.Equal(before.UpdatedAt) {
			t.Fatalf("executor recorded %q (updated %v), want %q (updated %v)", got.Executor, got.UpdatedAt, x, before.UpdatedAt)
		}
	}
	if n := events() - audited; n != 0 {
		t.Fatalf("recording how commands ran wrote %d audit events", n)
	}
}

// testSoulContactConcurrent: two runs reaching the same pending soul at
// once activate it once, with one audit event.
func testSoulContactConcurrent(t *testing.T, b testdb.Backend) {
	s := b.Open(t)
	if _, err := s.SoulCreate(ctx, store.SoulCreateParams{Soul: store.Soul{SID: "vm-2.local.test", Address: "10.0.0.4", Status: store.SoulPending}, Actor: "tok_admin"}); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 8)
	changed := make(chan int, 8)
	for i := range 8 {
		go func() {
			trs, err := s.SoulContact(ctx, store.SoulContactParams{Reached: []string{"vm-2.local.test"}, RunID: "run_" + string(rune('a'+i)), Actor: "tok_runner"})
			errs <- err
			changed <- len(trs)
		}()
	}
	total := 0
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		total += <-changed
	}
	if total != 1 {
		t.Fatalf("%d transitions reported, want 1", total)
	}
	if evs := contactEvents(t, s); len(evs) != 1 {
		t.Fatalf("%d contact audit events, want 1", len(evs))
	}
}

// SoulContactMigration checks migration 00008 (last_seen_at, last_error) on
// a database that upTo has migrated to version 6: a soul made before it
// survives with no last contact and no error. up applies every migration.
func SoulContactMigration(t *testing.T, db *sql.DB, upTo func(ctx context.Context, version int64) error, up func(ctx context.Context) error) {
	t.Helper()
	if err := upTo(ctx, 6); err != nil {
		t.Fatalf("migrate to version 6: %v", err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO souls (sid, status, address, created_at, updated_at) VALUES ('old.local.test', 'pending', '10.0.0.9', '2026-01-01 00:00:00', '2026-01-01 00:00:00')`); err != nil {
		t.Fatalf("insert a soul before the migration: %v", err)
	}
	if _, err := db.ExecContext(ctx, `SELECT last_seen_at FROM souls`); err == nil {
		t.Fatal("last_seen_at exists before migration 00008")
	}
	if err := up(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	var status, lastError string
	var seen sql.NullTime
	if err := db.QueryRowContext(ctx, `SELECT status, last_seen_at, last_error FROM souls WHERE sid = 'old.local.test'`).Scan(&status, &seen, &lastError); err != nil {
		t.Fatal(err)
	}
	if status != "pending" || seen.Valid || lastError != "" {
		t.Fatalf("after the migration: status %q, last_seen_at %v, last_error %q", status, seen, lastError)
	}
}
