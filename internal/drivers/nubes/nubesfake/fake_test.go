package nubesfake_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/drivers/nubes/deckapi"
	"github.com/soulstack/soulstack/internal/drivers/nubes/nubesfake"
)

const token = "fake-token-1"

func client(f *nubesfake.Fake) *deckapi.Client {
	return &deckapi.Client{BaseURL: f.URL, Token: func(context.Context) (string, error) { return token, nil },
		CallTimeout: 5 * time.Second, Attempts: 3, RetryBase: time.Millisecond}
}

// create runs a VM create to its end and returns the instance and the
// finished operation.
func create(t *testing.T, c *deckapi.Client, name string, params map[string]string) (string, deckapi.Operation) {
	t.Helper()
	ctx := context.Background()
	inst, err := c.CreateInstance(ctx, deckapi.ServiceVM, name, "soulstack test")
	if err != nil {
		t.Fatal(err)
	}
	op, err := c.StartOperation(ctx, inst, deckapi.OpCreate)
	if err != nil {
		t.Fatal(err)
	}
	o, err := c.Operation(ctx, op)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range o.Params {
		if v, ok := params[p.Name]; ok {
			if err := c.SetParam(ctx, op, p, v); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := c.Validate(ctx, op); err != nil {
		t.Fatal(err)
	}
	if err := c.Run(ctx, op); err != nil {
		t.Fatal(err)
	}
	return inst, finish(t, c, op)
}

func finish(t *testing.T, c *deckapi.Client, op string) deckapi.Operation {
	t.Helper()
	for i := 0; i < 20; i++ {
		o, err := c.Operation(context.Background(), op)
		if err != nil {
			t.Fatal(err)
		}
		if o.Finished != nil {
			return o
		}
	}
	t.Fatalf("operation %s never finished", op)
	return deckapi.Operation{}
}

// TestCreateToRunning: a VM's create is pending, then in progress, then
// finished with its stages; a second operation meanwhile is refused 422
// Concurrent operations; the VM deploys and then runs with its address and
// the parameters it was given (defaults for the others).
func TestCreateToRunning(t *testing.T) {
	f := nubesfake.New(token)
	defer f.Close()
	c := client(f)
	ctx := context.Background()
	inst, err := c.CreateInstance(ctx, deckapi.ServiceVM, "web-1", "d")
	if err != nil {
		t.Fatal(err)
	}
	op, err := c.StartOperation(ctx, inst, deckapi.OpCreate)
	if err != nil {
		t.Fatal(err)
	}
	o, _ := c.Operation(ctx, op)
	for _, p := range o.Params {
		switch p.Name {
		case "vappUid":
			_ = c.SetParam(ctx, op, p, "vapp-1")
		case "vmName":
			_ = c.SetParam(ctx, op, p, "web-1")
		case "vmCpu":
			_ = c.SetParam(ctx, op, p, "2")
		}
	}
	if err := c.Run(ctx, op); err != nil {
		t.Fatal(err)
	}
	c.Attempts = 1
	var apiErr *deckapi.Error
	if _, err := c.StartOperation(ctx, inst, deckapi.OpModify); !errors.As(err, &apiErr) || !apiErr.Concurrent() {
		t.Fatalf("a second operation while the create runs: %v, want 422 Concurrent operations", err)
	}
	if o, _ := c.Operation(ctx, op); !o.Pending || o.InProgress {
		t.Fatalf("first read: %+v, want pending", o)
	}
	if o, _ := c.Operation(ctx, op); o.Pending || !o.InProgress || o.Finished != nil {
		t.Fatalf("second read: %+v, want in progress", o)
	}
	done := finish(t, c, op)
	if done.Successful == nil || !*done.Successful || len(done.Stages) != 3 {
		t.Fatalf("finished = %+v", done)
	}
	in, _ := c.Instance(ctx, inst)
	if in.ExplainedStatus != "deploying" || in.State.Params[nubesfake.AddressKey] != nil {
		t.Fatalf("just after the create: %+v", in)
	}
	for i := 0; i < 5 && in.ExplainedStatus != "running"; i++ {
		in, _ = c.Instance(ctx, inst)
	}
	if in.ExplainedStatus != "running" || in.State.Params[nubesfake.AddressKey] == "" || in.State.Params["vmCpu"] != "2" || in.State.Params["vmRam"] != "1" {
		t.Fatalf("running = %+v", in)
	}
}

// TestFailures: a failing stage ends the create unsuccessful with its
// stage and log; a VM may never run; a create without its vApp is refused
// by validation; an expired token is 401; throttling is 429 (retried).
func TestFailures(t *testing.T) {
	f := nubesfake.New(token)
	defer f.Close()
	c := client(f)
	ctx := context.Background()
	f.FailStage("deploy")
	_, o := create(t, c, "bad-1", map[string]string{"vappUid": "v", "vmName": "bad-1"})
	if o.Successful == nil || *o.Successful || !strings.Contains(o.ErrorLog, "deploy") || len(o.Stages) != 2 || *o.Stages[1].Successful {
		t.Fatalf("a failing stage: %+v", o)
	}
	f.NeverRunning()
	inst, o := create(t, c, "stuck-1", map[string]string{"vappUid": "v", "vmName": "stuck-1"})
	for i := 0; i < 10; i++ {
		if in, _ := c.Instance(ctx, inst); in.ExplainedStatus != "deploying" {
			t.Fatalf("a VM that never runs: %+v", in)
		}
	}
	inst, _ = c.CreateInstance(ctx, deckapi.ServiceVM, "novapp", "")
	op, _ := c.StartOperation(ctx, inst, deckapi.OpCreate)
	c.Attempts = 1
	if err := c.Validate(ctx, op); err == nil || !strings.Contains(err.Error(), "vappUid") {
		t.Fatalf("validation without a vApp: %v", err)
	}
	f.Throttle(2)
	c.Attempts = 3
	if _, err := c.Instances(ctx, 1, 10); err != nil {
		t.Fatalf("throttled twice, then answered: %v", err)
	}
	f.Expire("fake-token-2")
	if _, err := c.Instances(ctx, 1, 10); !errors.Is(err, deckapi.ErrUnauthorized) {
		t.Fatalf("an expired token: %v", err)
	}
}

// TestSuspendAndDelete: suspend quarantines a VM (still listed); delete
// removes it and ends unsuccessful with "service deleted" (the quirk a
// client takes as success); the instance is then 404; the list pages.
func TestSuspendAndDelete(t *testing.T) {
	f := nubesfake.New(token)
	defer f.Close()
	c := client(f)
	ctx := context.Background()
	a, _ := create(t, c, "a", map[string]string{"vappUid": "v", "vmName": "a"})
	b, _ := create(t, c, "b", map[string]string{"vappUid": "v", "vmName": "b"})
	op, err := c.StartOperation(ctx, a, deckapi.OpSuspend)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Run(ctx, op)
	finish(t, c, op)
	if in, _ := c.Instance(ctx, a); in.Status != "suspended" {
		t.Fatalf("suspended = %+v", in)
	}
	op, _ = c.StartOperation(ctx, b, deckapi.OpDelete)
	_ = c.Run(ctx, op)
	if o := finish(t, c, op); *o.Successful || o.ErrorLog != nubesfake.DeletedMessage {
		t.Fatalf("delete = %+v, want unsuccessful with %q", o, nubesfake.DeletedMessage)
	}
	if _, err := c.Instance(ctx, b); !errors.Is(err, deckapi.ErrNotFound) {
		t.Fatalf("a deleted instance: %v", err)
	}
	p1, _ := c.Instances(ctx, 1, 1)
	p2, _ := c.Instances(ctx, 2, 1)
	if len(p1) != 1 || p1[0].UID != a || len(p2) != 0 {
		t.Fatalf("pages = %+v, %+v", p1, p2)
	}
	if got := f.Instances(); len(got) != 1 || got[0] != a {
		t.Fatalf("the fake holds %v", got)
	}
}
