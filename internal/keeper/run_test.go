package keeper_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/sshtest"
)

// scrapeMetrics reads the keeper's /metrics at url with the admin token of
// dataDir.
func scrapeMetrics(t *testing.T, url, dataDir string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dataDir, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, url+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(raw)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %d %v", resp.StatusCode, err)
	}
	return string(body)
}

// adminClient returns a client of the keeper k with the admin token of
// dataDir.
func adminClient(t *testing.T, k *proc, dataDir string) *client.Client {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dataDir, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(k.Addr, strings.TrimSpace(string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// addSoul registers a real sshd as a soul, its key in a 0600 file.
func addSoul(t testing.TB, c *client.Client, sid string, srv *sshtest.Server) {
	t.Helper()
	addSoulIn(t, c, sid, "", srv)
}

// addSoulIn registers sshd srv as soul sid of project (the caller's
// choice of project when empty).
func addSoulIn(t testing.TB, c *client.Client, sid, project string, srv *sshtest.Server) {
	t.Helper()
	keyPath := filepath.Join(t.TempDir(), sid+".key")
	if err := os.WriteFile(keyPath, srv.ClientKey, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := c.SoulCreate(context.Background(), client.SoulCreate{SID: sid, Address: srv.Addr, Project: project,
		Connection: client.Connection{Transport: "ssh", User: srv.User, Port: srv.Port, KeyRef: "file:" + keyPath}})
	if err != nil {
		t.Fatal(err)
	}
}

func readExample(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "examples", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func waitRun(t *testing.T, c *client.Client, id string) *client.Run {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := c.RunWait(ctx, id)
	if err != nil {
		t.Fatalf("wait for run %s: %v", id, err)
	}
	return r
}

// strictEvent fails unless the event is in the run vocabulary: a known
// kind whose data has exactly the fields of its client type.
func strictEvent(t *testing.T, e client.RunEvent) {
	t.Helper()
	data, err := e.Decode()
	if err != nil {
		t.Fatalf("event %d: %v", e.Seq, err)
	}
	v := reflect.New(reflect.TypeOf(data))
	dec := json.NewDecoder(bytes.NewReader(e.Data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v.Interface()); err != nil {
		t.Fatalf("event %d (%s): data %s is not %T: %v", e.Seq, e.Kind, e.Data, data, err)
	}
}

func TestRunHelloOverSSH(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	k := serve(t, dir)
	c := adminClient(t, k, filepath.Join(dir, ".keeper"))
	srv := sshtest.Start(t, sshtest.Options{})
	addSoul(t, c, "web-1.local.test", srv)
	marker := filepath.Join(t.TempDir(), "hello")
	scenario := strings.ReplaceAll(readExample(t, "hello.yaml"), "/tmp/soulstack-hello", marker)
	ctx := context.Background()

	run, created, err := c.RunCreate(ctx, client.RunCreate{Scenario: scenario, File: "hello.yaml", Input: map[string]any{"host": "web-1.local.test"}, Key: "first"})
	if err != nil || !created || run.Phase == "" {
		t.Fatalf("create: %+v %v %v", run, created, err)
	}
	// The same key and content: the same run, not a second execution.
	again, created, err := c.RunCreate(ctx, client.RunCreate{Scenario: scenario, File: "hello.yaml", Input: map[string]any{"host": "web-1.local.test"}, Key: "first"})
	if err != nil || created || again.ID != run.ID {
		t.Fatalf("same key: %+v %v %v", again, created, err)
	}
	_, _, err = c.RunCreate(ctx, client.RunCreate{Scenario: scenario, Input: map[string]any{"host": "web-1.local.test", "greeting": "other"}, Key: "first"})
	var p *client.Problem
	if !errors.As(err, &p) || p.Code != "run.key_conflict" || p.Status != 409 {
		t.Fatalf("same key, other input: %v", err)
	}

	var events []client.RunEvent
	if err := c.RunEvents(ctx, run.ID, 0, func(e client.RunEvent) error { events = append(events, e); return nil }); err != nil {
		t.Fatalf("events: %v", err)
	}
	final := waitRun(t, c, run.ID)
	if final.Phase != "Succeeded" || len(final.Steps) != 2 {
		t.Fatalf("run = %+v", final)
	}
	greet, show := final.Steps[0], final.Steps[1]
	if greet.Status != "changed" || len(greet.Targets) != 1 || greet.Targets[0].SID != "web-1.local.test" || !greet.Targets[0].Changed {
		t.Fatalf("greet = %+v", greet)
	}
	var out struct {
		Stdout string `json:"stdout"`
	}
	_ = json.Unmarshal(show.Targets[0].Output, &out)
	if show.Status != "ok" || out.Stdout != "hello from Soul Stack\n" {
		t.Fatalf("show = %+v (%s)", show, show.Targets[0].Output)
	}
	var msg map[string]any
	if err := json.Unmarshal([]byte(final.Message), &msg); err != nil || msg["show"] == nil {
		t.Fatalf("message = %q", final.Message)
	}
	kinds := map[client.EventKind]int{}
	for i, e := range events {
		kinds[e.Kind]++
		strictEvent(t, e)
		if i > 0 && e.Seq != events[i-1].Seq+1 {
			t.Fatalf("event seq gap: %d after %d", e.Seq, events[i-1].Seq)
		}
	}
	if kinds["step.started"] != 2 || kinds["step.finished"] != 2 || kinds["target.result"] != 2 || kinds["run.finished"] != 1 {
		t.Fatalf("event kinds = %v", kinds)
	}
	// Resume the stream from the middle with Last-Event-ID.
	var tail []client.RunEvent
	if err := c.RunEvents(ctx, run.ID, events[2].Seq, func(e client.RunEvent) error { tail = append(tail, e); return nil }); err != nil || len(tail) != len(events)-3 || tail[0].Seq != events[3].Seq {
		t.Fatalf("resumed stream: %d events from %v, %v", len(tail), tail, err)
	}

	// A new key runs again; the creates guard now skips the command.
	run2, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: scenario, Input: map[string]any{"host": "web-1.local.test"}, Key: "second"})
	if err != nil {
		t.Fatal(err)
	}
	final2 := waitRun(t, c, run2.ID)
	if final2.Phase != "Succeeded" || final2.Steps[0].Status != "ok" {
		t.Fatalf("second run: %+v", final2.Steps)
	}
	// The soul's host key was pinned on first contact.
	so, err := c.SoulGet(ctx, "web-1.local.test")
	if err != nil || !strings.HasPrefix(so.Connection.HostKey, "ssh-ed25519 ") {
		t.Fatalf("host key not pinned: %+v %v", so.Connection, err)
	}
}

func TestRunValidationAndUnreachable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	k := serve(t, dir)
	c := adminClient(t, k, filepath.Join(dir, ".keeper"))
	ctx := context.Background()
	bad := "steps:\n  - name: a\n    on: keeper\n    module: core.command.ran\n    params: {cmd: true}\n  - name: b\n    on: web-1\n    module: core.nope.ran\n"
	_, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: bad, File: "bad.yaml"})
	var p *client.Problem
	if !errors.As(err, &p) || p.Code != "scenario.invalid" || p.Status != 422 || len(p.Errors) < 2 {
		t.Fatalf("invalid scenario: %v", err)
	}
	for _, e := range p.Errors {
		if !strings.HasPrefix(e.Location, "bad.yaml:") || e.Code == "" {
			t.Fatalf("problem without file:line:col or code: %+v", e)
		}
	}
	unknown := "steps:\n  - name: a\n    on: ghost.local.test\n    module: core.command.ran\n    params: {cmd: 'true'}\n"
	_, _, err = c.RunCreate(ctx, client.RunCreate{Scenario: unknown, File: "u.yaml"})
	if !errors.As(err, &p) || p.Errors[0].Code != "scenario.unknown_soul" || p.Errors[0].Location != "u.yaml:2:5" {
		t.Fatalf("unregistered target: %v", err)
	}
	runs, _ := c.RunList(ctx, client.RunListOptions{})
	if len(runs.Items) != 0 {
		t.Fatalf("invalid scenarios created runs: %+v", runs.Items)
	}

	// A soul whose sshd is gone is unreachable, not a crash.
	srv := sshtest.Start(t, sshtest.Options{})
	addSoul(t, c, "gone.local.test", srv)
	srv.Stop()
	sc := "steps:\n  - name: a\n    on: gone.local.test\n    module: core.command.ran\n    connect: {retries: 1, delay: 100ms}\n    params: {cmd: 'true'}\n"
	run, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: sc})
	if err != nil {
		t.Fatal(err)
	}
	final := waitRun(t, c, run.ID)
	tg := final.Steps[0].Targets[0]
	if final.Phase != "Failed" || final.Error == nil || final.Error.Code != "run.targets_failed" || tg.Status != "unreachable" || tg.Error.Code != "ssh.unreachable" || tg.Attempts != 1 {
		t.Fatalf("unreachable run: %+v target %+v", final, tg)
	}
}
