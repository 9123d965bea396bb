package client_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/soulstack/soulstack/client"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

var at = time.Date(2026, 12, 1, 13, 40, 0, 0, time.UTC)

// samples is one event of each stored kind, as a run emits them.
var samples = []struct {
	step, sid string
	data      client.EventData
}{
	{"", "", client.RunPhaseData{Phase: client.PhaseRunning}},
	{"base", "", client.StepStartedData{Index: 1, Module: "core.pkg.installed", Targets: []string{"web-1", "web-2"}}},
	{"base", "web-2", client.TargetResultData{Status: client.TargetUnreachable, Attempts: 3, DurationMS: 2000,
		Error: &client.RunError{Code: "ssh.unreachable", Message: "dial tcp 127.0.0.2:22: connection refused"}}},
	{"base", "web-1", client.LogData{Message: "attempt 1 of 3 failed: command.failed; retrying"}},
	{"base", "", client.StepFinishedData{Index: 1, Status: client.StepFailed, Changed: true,
		Counts: map[client.TargetStatus]int{client.TargetChanged: 1, client.TargetUnreachable: 1}}},
	{"provision", "", client.StepInterruptedData{Index: 0, Module: "core.cloud.created"}},
	{"deploy", "web-1", client.CommandReattachedData{Command: "run_0123.2.1.1.5f3a9c1e0b7d4a21", Transport: "ssh", Epoch: 2, Why: "resumed"}},
	{"", "", client.RunFinishedData{Phase: client.PhaseFailed, Error: &client.RunError{Code: "run.interrupted", Message: "the keeper stopped while step \"provision\" was running"}}},
}

// TestEventGolden pins the JSON of each event kind: the whole event as GET
// /v1/runs/{id}/events sends it, in testdata/events/<kind>.json (rewrite
// with -update and review the diff: consumers rely on these shapes).
func TestEventGolden(t *testing.T) {
	t.Parallel()
	seen := map[client.EventKind]bool{}
	for i, sm := range samples {
		kind := sm.data.EventKind()
		seen[kind] = true
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			data, err := json.Marshal(sm.data)
			if err != nil {
				t.Fatal(err)
			}
			ev := client.RunEvent{Seq: int64(i + 1), At: at, Kind: kind, Step: sm.step, SID: sm.sid, Data: data}
			got, err := json.MarshalIndent(ev, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			path := filepath.Join("testdata", "events", string(kind)+".json")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s changed:\n%s\nwant:\n%s", path, got, want)
			}
			// What the golden file holds decodes back to the same data.
			var back client.RunEvent
			if err := json.Unmarshal(want, &back); err != nil {
				t.Fatal(err)
			}
			d, err := back.Decode()
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(d, sm.data) {
				t.Errorf("decoded %#v, want %#v", d, sm.data)
			}
		})
	}
	for _, k := range client.EventKinds {
		if !seen[k] {
			t.Errorf("no golden sample of kind %s", k)
		}
	}
}

// TestEventsStoredByPreviousVersion: events the keeper stored before the
// vocabulary was typed (built as maps, so with their keys sorted) decode
// into the typed data with nothing lost; run_events needs no migration.
func TestEventsStoredByPreviousVersion(t *testing.T) {
	t.Parallel()
	f, err := os.ReadFile(filepath.Join("testdata", "events-stored-v0.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	want := []client.EventData{
		client.RunPhaseData{Phase: client.PhaseRunning},
		client.StepStartedData{Index: 0, Module: "core.command.ran", Targets: []string{"keeper"}},
		client.TargetResultData{Status: client.TargetChanged, Changed: true, Attempts: 1, DurationMS: 12},
		client.StepFinishedData{Index: 0, Status: client.StepChanged, Changed: true, Counts: map[client.TargetStatus]int{client.TargetChanged: 1}},
		client.StepStartedData{Index: 1, Module: "core.pkg.installed", Targets: []string{"web-1", "web-2"}},
		client.LogData{Message: "attempt 1 of 2 failed: ssh.unreachable; retrying"},
		client.TargetResultData{Status: client.TargetFailed, Attempts: 2, DurationMS: 40, Error: &client.RunError{Code: "pkg.failed", Message: "apt-get: exit status 100"}},
		client.TargetResultData{Status: client.TargetOK, Attempts: 1, DurationMS: 30},
		client.StepFinishedData{Index: 1, Status: client.StepFailed, Counts: map[client.TargetStatus]int{client.TargetFailed: 1, client.TargetOK: 1}},
		client.StepStartedData{Index: 2, Module: "core.file.present", Targets: []string{"web-1"}},
		client.TargetResultData{Status: client.TargetSkipped},
		client.StepFinishedData{Index: 2, Status: client.StepSkipped, Counts: map[client.TargetStatus]int{client.TargetSkipped: 1}},
		client.StepInterruptedData{Index: 3, Module: "core.cloud.created"},
		client.RunFinishedData{Phase: client.PhaseFailed, Error: &client.RunError{Code: "run.interrupted", Message: "the keeper stopped"}},
	}
	lines := strings.Split(strings.TrimSpace(string(f)), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%d stored events, want %d", len(lines), len(want))
	}
	for i, line := range lines {
		var ev client.RunEvent
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		d, err := ev.Decode()
		if err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		if !reflect.DeepEqual(d, want[i]) {
			t.Errorf("line %d: decoded %#v, want %#v", i+1, d, want[i])
		}
		// Every field the old event had is a field of the typed data.
		var old, typed map[string]any
		_ = json.Unmarshal(ev.Data, &old)
		b, _ := json.Marshal(d)
		_ = json.Unmarshal(b, &typed)
		for k := range old {
			if _, ok := typed[k]; !ok {
				t.Errorf("line %d: field %q of the stored event is lost", i+1, k)
			}
		}
	}
}

func TestEventDecodeRefuses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		ev      client.RunEvent
		unknown bool
	}{
		{"unknown kind", client.RunEvent{Kind: "stream.lag", Data: json.RawMessage(`{}`)}, true},
		{"error as text", client.RunEvent{Kind: client.EventTargetResult, Data: json.RawMessage(`{"error":"plain text"}`)}, false},
		{"targets as a number", client.RunEvent{Kind: client.EventStepStarted, Data: json.RawMessage(`{"targets":2}`)}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := tt.ev.Decode()
			if err == nil {
				t.Fatal("decoded")
			}
			if errors.Is(err, client.ErrUnknownEventKind) != tt.unknown {
				t.Errorf("err %v: unknown kind %v, want %v", err, !tt.unknown, tt.unknown)
			}
		})
	}
}

// TestSummarizeStep is the one rule of a step's status; the engine and
// every reader use it, so that a step whose targets were all skipped is
// skipped everywhere.
func TestSummarizeStep(t *testing.T) {
	t.Parallel()
	ok, ch, fa, sk, un := client.TargetOK, client.TargetChanged, client.TargetFailed, client.TargetSkipped, client.TargetUnreachable
	tests := []struct {
		name    string
		in      []client.TargetStatus
		want    client.StepStatus
		changed bool
	}{
		{"no targets", nil, client.StepSkipped, false},
		{"all skipped", []client.TargetStatus{sk, sk}, client.StepSkipped, false},
		{"ok and skipped", []client.TargetStatus{sk, ok}, client.StepOK, false},
		{"changed", []client.TargetStatus{ok, ch, sk}, client.StepChanged, true},
		{"failed wins", []client.TargetStatus{ch, fa}, client.StepFailed, true},
		{"unreachable fails", []client.TargetStatus{ok, un}, client.StepFailed, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, changed := client.SummarizeStep(tt.in)
			if got != tt.want || changed != tt.changed {
				t.Errorf("SummarizeStep(%v) = %s, %v; want %s, %v", tt.in, got, changed, tt.want, tt.changed)
			}
		})
	}
}
