package keeper_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/config"
	"github.com/soulstack/soulstack/internal/keepertest"
	"github.com/soulstack/soulstack/internal/notify"
	"github.com/soulstack/soulstack/internal/sshtest"
)

// receiver is a webhook receiver on loopback that checks each delivery's
// signature as a real one would and keeps what it got.
type receiver struct {
	secret []byte
	mu     sync.Mutex
	got    []notify.Payload
	bad    []string
	srv    *http.Server
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := notify.Verify(r.secret, req.Header.Get("X-Soulstack-Signature"), body, time.Now(), 5*time.Minute); err != nil {
		r.bad = append(r.bad, err.Error())
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	var p notify.Payload
	if err := json.Unmarshal(body, &p); err != nil || p.Event != req.Header.Get("X-Soulstack-Event") || p.ID != req.Header.Get("X-Soulstack-Delivery") {
		r.bad = append(r.bad, "headers and body disagree: "+string(body))
		http.Error(w, "bad", http.StatusBadRequest)
		return
	}
	r.got = append(r.got, p)
}

func (r *receiver) listen(t *testing.T, addr string) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	r.srv = &http.Server{Handler: r, Addr: ln.Addr().String()}
	go r.srv.Serve(ln)
	t.Cleanup(func() { r.srv.Close() })
}

func (r *receiver) events() []notify.Payload {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]notify.Payload(nil), r.got...)
}

// TestWebhookNotifications: keeper.yml's notifications deliver
// run.succeeded and run.failed to real HTTP receivers on loopback, signed
// (HMAC-SHA256 over the timestamp and body, checked by the receiver with
// notify.Verify), with secrets masked; a receiver that is down for a while
// gets its delivery once it is back, through the queue's retries, and the
// delivery log says how many attempts it took. A notification that does
// not name an event gets none.
func TestWebhookNotifications(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "webhook.secret")
	if err := os.WriteFile(secretFile, []byte("whsec-test-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	up := &receiver{secret: []byte("whsec-test-0123456789")}
	up.listen(t, "127.0.0.1:0")
	// The second receiver's port is taken now and released, then served
	// only after a while: the first attempts find it down.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	downAddr := ln.Addr().String()
	ln.Close()
	down := &receiver{secret: []byte("whsec-test-0123456789")}

	srv := sshtest.Start(t, sshtest.Options{})
	k := keepertest.Start(t, func(c *config.Config) {
		c.Notifications = []config.Notification{
			{Name: "ops", URL: "http://" + up.srv.Addr + "/hook", Events: []string{"run.succeeded", "run.failed"}, SecretRef: "file:" + secretFile},
			{Name: "late", URL: "http://" + downAddr + "/hook", Events: []string{"run.failed"}, SecretRef: "file:" + secretFile},
		}
	})
	c := k.Client
	ctx := context.Background()
	key := filepath.Join(dir, "id")
	if err := os.WriteFile(key, srv.ClientKey, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SoulCreate(ctx, client.SoulCreate{SID: "web-1.hook.test", Address: srv.Addr,
		Connection: client.Connection{Transport: "ssh", User: srv.User, Port: srv.Port, KeyRef: "file:" + key}}); err != nil {
		t.Fatal(err)
	}
	ok, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: "name: fine\nsteps:\n  - name: hi\n    on: web-1.hook.test\n    module: core.command.ran\n    params: {cmd: \"true\"}\n"})
	if err != nil {
		t.Fatal(err)
	}
	waitRun(t, c, ok.ID)
	bad, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: `name: broken
inputs:
  db_password: {type: string, secret: true}
steps:
  - name: fail
    on: web-1.hook.test
    module: core.command.ran
    params: {cmd: "echo ${ input.db_password } >&2; exit 3"}
`, Input: map[string]any{"db_password": "canary-hook-pw"}})
	if err != nil {
		t.Fatal(err)
	}
	waitRun(t, c, bad.ID)

	waitFor := func(r *receiver, n int) []notify.Payload {
		t.Helper()
		deadline := time.Now().Add(45 * time.Second)
		for len(r.events()) < n {
			if time.Now().After(deadline) {
				t.Fatalf("%d deliveries within 45 s, want %d (bad: %v)", len(r.events()), n, r.bad)
			}
			time.Sleep(100 * time.Millisecond)
		}
		return r.events()
	}
	got := waitFor(up, 2)
	byEvent := map[string]notify.Payload{}
	for _, p := range got {
		byEvent[p.Event] = p
	}
	if byEvent["run.succeeded"].Object != "run/"+ok.ID || byEvent["run.failed"].Object != "run/"+bad.ID || len(up.bad) != 0 {
		t.Fatalf("deliveries %+v, refused %v", got, up.bad)
	}
	raw, _ := json.Marshal(byEvent["run.failed"])
	if strings.Contains(string(raw), "canary-hook-pw") {
		t.Fatalf("the run.failed delivery carries the secret input: %s", raw)
	}

	// The late receiver comes up after a few seconds: the delivery, tried
	// and failed meanwhile, arrives then.
	time.Sleep(3 * time.Second)
	down.listen(t, downAddr)
	late := waitFor(down, 1)
	if late[0].Event != "run.failed" || late[0].Object != "run/"+bad.ID || len(late) != 1 {
		t.Fatalf("late deliveries %+v", late)
	}
	var log *client.DeliveryList
	deadline := time.Now().Add(10 * time.Second)
	for {
		log, err = c.Deliveries(ctx, client.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		delivered := 0
		for _, d := range log.Items {
			if d.Status == "delivered" {
				delivered++
			}
		}
		if delivered == 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, d := range log.Items {
		if d.Status != "delivered" {
			t.Fatalf("delivery log %+v: not all delivered", log.Items)
		}
		if d.Notification == "late" && (d.Attempts < 2 || d.LastCode != 200) {
			t.Fatalf("the late delivery: %+v, want more than one attempt", d)
		}
	}
	if len(log.Items) != 3 {
		t.Fatalf("delivery log %+v, want 3 (late gets run.failed only)", log.Items)
	}
}
