package storetest

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/testdb"
)

func newRun(id, key, digest string) store.Run {
	return store.Run{ID: id, Key: key, Digest: digest, Name: "hello", Scenario: "steps: []", InputSealed: "sealed:v1:x", InputMasked: json.RawMessage(`{"a":1}`), Timeout: 15 * time.Minute}
}

func testRunCreateKey(t *testing.T, b testdb.Backend) {
	s := b.Open(t)
	enqueued := 0
	enqueue := func(context.Context, *sql.Tx) error { enqueued++; return nil }
	r, created, err := s.RunCreate(ctx, store.RunCreateParams{Run: newRun("run_1", "k1", "d1"), Actor: "tok_a", Enqueue: enqueue})
	if err != nil || !created || r.Phase != store.PhasePending || r.Timeout != 15*time.Minute || r.Key != "k1" || enqueued != 1 {
		t.Fatalf("create = %+v, %v, %v (enqueued %d)", r, created, err, enqueued)
	}
	if h, err := s.RunHead(ctx, "run_1"); err != nil || h.Phase != store.PhasePending || h.FinishedAt != nil {
		t.Fatalf("head of run_1 = %+v, %v", h, err)
	}
	if _, err := s.RunHead(ctx, "run_none"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("phase of an unknown run: %v", err)
	}
	again, created, err := s.RunCreate(ctx, store.RunCreateParams{Run: newRun("run_2", "k1", "d1"), Actor: "tok_a", Enqueue: enqueue})
	if err != nil || created || again.ID != "run_1" || enqueued != 1 {
		t.Fatalf("same key, same content: %+v %v %v (enqueued %d)", again.ID, created, err, enqueued)
	}
	if _, _, err := s.RunCreate(ctx, store.RunCreateParams{Run: newRun("run_3", "k1", "other"), Actor: "tok_a", Enqueue: enqueue}); !errors.Is(err, store.ErrKeyConflict) {
		t.Fatalf("same key, other content: %v", err)
	}
	// A key belongs to the actor that used it: another actor's key names no
	// run, whether its content matches or not, so the answer says nothing
	// about the other actor's run.
	for i, digest := range []string{"other", "d1"} {
		id := fmt.Sprintf("run_b%d", i)
		r, created, err := s.RunCreate(ctx, store.RunCreateParams{Run: newRun(id, "k1", digest), Actor: store.Actor(fmt.Sprintf("tok_b%d", i)), Enqueue: enqueue})
		if err != nil || !created || r.ID != id || r.Key != "k1" {
			t.Fatalf("other actor, same key, digest %s: %+v %v %v", digest, r.ID, created, err)
		}
	}
	mine, created, err := s.RunCreate(ctx, store.RunCreateParams{Run: newRun("run_b9", "k1", "d1"), Actor: "tok_b1", Enqueue: enqueue})
	if err != nil || created || mine.ID != "run_b1" {
		t.Fatalf("second actor's own key again: %+v %v %v", mine.ID, created, err)
	}
	if _, _, err := s.RunCreate(ctx, store.RunCreateParams{Run: newRun("run_b8", "k1", "d2"), Actor: "tok_b1"}); !errors.Is(err, store.ErrKeyConflict) {
		t.Fatalf("second actor's own key, other content: %v", err)
	}
	if first, _ := s.RunGet(ctx, "run_1"); first.CreatedBy != "tok_a" || first.Digest != "d1" {
		t.Fatalf("the first actor's run changed: %+v", first)
	}
	// An enqueue failure leaves no run behind.
	_, _, err = s.RunCreate(ctx, store.RunCreateParams{Run: newRun("run_4", "", "d4"), Actor: "tok_a", Enqueue: func(context.Context, *sql.Tx) error { return errors.New("queue down") }})
	if err == nil {
		t.Fatal("create succeeded although enqueue failed")
	}
	if _, err := s.RunGet(ctx, "run_4"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("run exists after failed enqueue: %v", err)
	}
	// Concurrent creates with one key: one run.
	var wg sync.WaitGroup
	ids := make([]string, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, _, err := s.RunCreate(ctx, store.RunCreateParams{Run: newRun(fmt.Sprintf("run_c%d", i), "race", "dr"), Actor: "tok_a"})
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = r.ID
		}()
	}
	wg.Wait()
	for _, id := range ids[1:] {
		if id != ids[0] {
			t.Fatalf("concurrent creates with one key made different runs: %v", ids)
		}
	}
	list, err := s.RunList(ctx, store.RunListParams{ListParams: store.ListParams{Limit: 10}})
	if err != nil || len(list) != 4 || list[0].ID != "run_c"+ids[0][5:] && list[0].ID < list[1].ID {
		t.Fatalf("list = %d runs, %v", len(list), err)
	}
}

func testRunLifecycle(t *testing.T, b testdb.Backend) {
	s := b.Open(t)
	if _, _, err := s.RunCreate(ctx, store.RunCreateParams{Run: newRun("run_1", "", "d"), Actor: "tok_a"}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if err := s.KeeperBeat(ctx, "keeper-a"); err != nil {
		t.Fatal(err)
	}
	r, ok, err := s.RunClaim(ctx, "run_1", "keeper-a", now.Add(-30*time.Second))
	if err != nil || !ok || r.Phase != store.PhaseRunning || r.Owner != "keeper-a" || r.StartedAt == nil || r.Epoch != 1 {
		t.Fatalf("claim = %+v %v %v", r, ok, err)
	}
	if _, ok, _ := s.RunClaim(ctx, "run_1", "keeper-b", now.Add(-30*time.Second)); ok {
		t.Fatal("a second keeper claimed a live run")
	}
	if err := s.KeeperBeat(ctx, "keeper-a"); err != nil {
		t.Fatalf("heartbeat: %v", err)
	}
	if held, err := s.RunsHeld(ctx, "keeper-a"); err != nil || len(held) != 1 || held["run_1"] {
		t.Fatalf("held by keeper-a = %v, %v", held, err)
	}
	if held, err := s.RunsHeld(ctx, "keeper-b"); err != nil || len(held) != 0 {
		t.Fatalf("held by keeper-b = %v, %v", held, err)
	}
	// The write-ahead record of a command needs the lease in its epoch.
	cmd := store.RunCommand{RunID: "run_1", ID: "run_1.0.1.1.x", StepIndex: 0, SID: "web-1", Attempt: 1, N: 1, Epoch: 1, Digest: "d1", Transport: "ssh"}
	if err := s.RunCommandRecord(ctx, "keeper-a", cmd); err != nil {
		t.Fatalf("record command: %v", err)
	}
	if err := s.RunCommandRecord(ctx, "keeper-b", cmd); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("record command by non-owner: %v", err)
	}
	stale := cmd
	stale.Epoch = 0
	if err := s.RunCommandRecord(ctx, "keeper-a", stale); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("record command of an older epoch: %v", err)
	}
	// The lease can be taken over once the owner's heartbeat is stale.
	if ids, err := s.RunsOrphaned(ctx, "", time.Now().Add(time.Minute)); err != nil || len(ids) != 1 {
		t.Fatalf("orphaned (stale) = %v, %v", ids, err)
	}
	if ids, _ := s.RunsOrphaned(ctx, "", time.Now().Add(-time.Minute)); len(ids) != 0 {
		t.Fatalf("a live run is orphaned: %v", ids)
	}
	if ids, _ := s.RunsOrphaned(ctx, "keeper-a", time.Now().Add(-time.Minute)); len(ids) != 1 {
		t.Fatalf("own run after restart not orphaned: %v", ids)
	}
	if r, ok, _ := s.RunClaim(ctx, "run_1", "keeper-b", time.Now().Add(time.Minute)); !ok || r.Epoch != 2 {
		t.Fatalf("stale lease not taken over: %v %+v", ok, r)
	}
	if err := s.RunStateSave(ctx, "run_1", "keeper-a", "sealed:v1:old"); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("old owner saved state: %v", err)
	}
	if err := s.RunCommandRecord(ctx, "keeper-a", cmd); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("old owner recorded a command: %v", err)
	}
	// The new execution sends the same command again, in its epoch.
	cmd.Epoch, cmd.Transport = 2, "agent"
	if err := s.RunCommandRecord(ctx, "keeper-b", cmd); err != nil {
		t.Fatalf("record command again: %v", err)
	}
	if cmds, err := s.RunCommands(ctx, "run_1"); err != nil || len(cmds) != 1 || cmds[0].Epoch != 2 || cmds[0].Transport != "agent" || cmds[0].SID != "web-1" || cmds[0].SentAt.IsZero() {
		t.Fatalf("commands = %+v, %v", cmds, err)
	}
	// A draining keeper hands its lease back: another keeper may take the
	// run over at once, without waiting for the heartbeat to go stale.
	if err := s.RunRelease(ctx, "run_1", "keeper-a"); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("release by non-owner: %v", err)
	}
	if err := s.RunRelease(ctx, "run_1", "keeper-b"); err != nil {
		t.Fatalf("release: %v", err)
	}
	if ids, _ := s.RunsOrphaned(ctx, "", time.Now().Add(-time.Minute)); len(ids) != 1 {
		t.Fatalf("a released run is not orphaned at once: %v", ids)
	}
	if r, ok, err := s.RunClaim(ctx, "run_1", "keeper-c", time.Now().Add(-time.Minute)); err != nil || !ok || r.Phase != store.PhaseRunning || r.Epoch != 3 {
		t.Fatalf("claim a released run = %+v %v %v", r, ok, err)
	}
	if _, ok, _ := s.RunClaim(ctx, "run_1", "keeper-b", time.Now().Add(time.Minute)); !ok {
		t.Fatal("the lease did not come back to keeper-b")
	}
	started := time.Now().UTC()
	if err := s.RunStepSave(ctx, store.RunStep{RunID: "run_1", Index: 0, Name: "hello", Module: "core.command.ran", Status: "running", StartedAt: &started}); err != nil {
		t.Fatal(err)
	}
	if err := s.RunTargetSave(ctx, store.RunTarget{RunID: "run_1", StepIndex: 0, SID: "web-1", Status: "changed", Changed: true, Output: json.RawMessage(`{"rc":0}`), Attempts: 1, DurationMS: 12}); err != nil {
		t.Fatal(err)
	}
	if err := s.RunTargetSave(ctx, store.RunTarget{RunID: "run_1", StepIndex: 0, SID: "web-2", Status: "unreachable", ErrorCode: "ssh.unreachable", ErrorMsg: "no route", Attempts: 3}); err != nil {
		t.Fatal(err)
	}
	fin := time.Now().UTC()
	if err := s.RunStepSave(ctx, store.RunStep{RunID: "run_1", Index: 0, Name: "hello", Module: "core.command.ran", Status: "failed", FinishedAt: &fin}); err != nil {
		t.Fatal(err)
	}
	steps, targets, err := s.RunSteps(ctx, "run_1")
	if err != nil || len(steps) != 1 || steps[0].Status != "failed" || steps[0].StartedAt == nil || steps[0].FinishedAt == nil || len(targets) != 2 || !targets[0].Changed || targets[1].ErrorCode != "ssh.unreachable" {
		t.Fatalf("steps = %+v targets = %+v, %v", steps, targets, err)
	}
	for i := 1; i <= 3; i++ {
		if err := s.RunEventAppend(ctx, store.RunEvent{RunID: "run_1", Seq: int64(i), At: time.Now(), Kind: "log", Data: json.RawMessage(`{"line":"x"}`)}); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := s.RunEvents(ctx, "run_1", 1, 10)
	if err != nil || len(evs) != 2 || evs[0].Seq != 2 {
		t.Fatalf("events after 1 = %+v, %v", evs, err)
	}
	if _, err := s.RunCancel(ctx, store.DeleteParams{Key: "run_1", Actor: "tok_b"}); err != nil {
		t.Fatal(err)
	}
	if held, err := s.RunsHeld(ctx, "keeper-b"); err != nil || !held["run_1"] {
		t.Fatalf("cancel request not seen by the held runs: %v %v", held, err)
	}
	if err := s.RunFinish(ctx, store.RunFinishParams{ID: "run_1", Owner: "keeper-a", Phase: store.PhaseSucceeded}); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("finish by old owner: %v", err)
	}
	if err := s.RunFinish(ctx, store.RunFinishParams{ID: "run_1", Owner: "keeper-b", Phase: store.PhaseCancelled, ErrorCode: "run.cancelled", ErrorMsg: "cancelled", Outputs: json.RawMessage(`{"hello":{}}`), Message: `{"hello":{}}`}); err != nil {
		t.Fatal(err)
	}
	r, _ = s.RunGet(ctx, "run_1")
	if r.Phase != store.PhaseCancelled || r.FinishedAt == nil || r.Message != `{"hello":{}}` {
		t.Fatalf("finished run = %+v", r)
	}
	if _, err := s.RunCancel(ctx, store.DeleteParams{Key: "run_1", Actor: "tok_b"}); !errors.Is(err, store.ErrFinished) {
		t.Fatalf("cancel finished run: %v", err)
	}
	events, _ := s.AuditList(ctx, store.AuditListParams{})
	var actions []string
	for _, e := range events {
		actions = append(actions, e.Action+" by "+e.ActorAID)
	}
	// run.started and run.finished carry the run's creator, never the
	// keeper; run.cancelled carries who cancelled it.
	if fmt.Sprint(actions) != "[run.started by tok_a run.cancelled by tok_b run.finished by tok_a]" {
		t.Fatalf("audit = %v", actions)
	}
	if !strings.Contains(events[1].Payload, `"created_by":"tok_a"`) {
		t.Fatalf("run.cancelled payload = %s", events[1].Payload)
	}
	// A Pending run is cancelled at once.
	if _, _, err := s.RunCreate(ctx, store.RunCreateParams{Run: newRun("run_2", "", "d"), Actor: "tok_a"}); err != nil {
		t.Fatal(err)
	}
	r, err = s.RunCancel(ctx, store.DeleteParams{Key: "run_2", Actor: "tok_b"})
	if err != nil || r.Phase != store.PhaseCancelled || r.FinishedAt == nil || r.Message != "run.cancelled: cancelled by tok_b before it started" {
		t.Fatalf("cancel pending = %+v, %v", r, err)
	}
	if _, ok, _ := s.RunClaim(ctx, "run_2", "keeper-a", time.Now()); ok {
		t.Fatal("a cancelled run was claimed")
	}
	verifyChain(t, s, 5)
}

func testSoulHostKey(t *testing.T, b testdb.Backend) {
	s := b.Open(t)
	if _, err := s.SoulCreate(ctx, store.SoulCreateParams{Soul: store.Soul{SID: "h1", Address: "127.0.0.1", Connection: store.Connection{Transport: "ssh", User: "root", Port: 22}}, Actor: "tok_a"}); err != nil {
		t.Fatal(err)
	}
	if err := s.SoulPinHostKey(ctx, store.SoulHostKeyParams{SID: "h1", HostKey: "ssh-ed25519 AAAAfirst", Actor: store.ActorKeeper}); err != nil {
		t.Fatal(err)
	}
	if err := s.SoulPinHostKey(ctx, store.SoulHostKeyParams{SID: "h1", HostKey: "ssh-ed25519 AAAAsecond", Actor: store.ActorKeeper}); !errors.Is(err, store.ErrExists) {
		t.Fatalf("second pin: %v", err)
	}
	if err := s.SoulPinHostKey(ctx, store.SoulHostKeyParams{SID: "ghost", HostKey: "k", Actor: store.ActorKeeper}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("pin unknown soul: %v", err)
	}
	so, _ := s.SoulGet(ctx, "h1")
	if so.Connection.HostKey != "ssh-ed25519 AAAAfirst" || so.Connection.User != "root" {
		t.Fatalf("connection = %+v", so.Connection)
	}
	if err := s.AuditRecord(ctx, store.AuditParams{Actor: store.ActorKeeper, Action: "ssh.host_key_mismatch", Object: "soul/h1", Payload: map[string]any{"presented": "ssh-ed25519 AAAAother"}}); err != nil {
		t.Fatal(err)
	}
	events, _ := s.AuditList(ctx, store.AuditListParams{})
	if len(events) != 3 || events[1].Action != "soul.host_key_pinned" || events[2].Action != "ssh.host_key_mismatch" {
		t.Fatalf("audit = %+v", events)
	}
}
