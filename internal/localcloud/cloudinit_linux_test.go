package localcloud

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/soulstack/soulstack/driversdk"
)

// TestCloudInitStatus: a VM's init reports its userdata the way cloud-init
// does, through /run/cloud-init/{status,result}.json and the VM's
// cloud-init status command: running while runcmd runs, done (exit 0)
// once it has, error (exit 1, with the failure under --long and in
// result.json) when runcmd failed, and done at once without userdata.
func TestCloudInitStatus(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	// runcmd waits until the test lets it go, so "running" is not a race.
	held := "#cloud-config\nruncmd:\n  - while [ ! -e /run/go ]; do sleep 0.05; done\n  - echo finished > /root/held.out\n"
	failing := "#cloud-config\nruncmd:\n  - echo about-to-fail\n  - exit 4\n"
	suffix := fmt.Sprintf("%x", time.Now().UnixNano()&0xffffff)
	vms := e.create(t, driversdk.CreateRequest{
		RequestID: "req-ci-" + suffix, RunID: "run-ci-" + suffix,
		Profile: json.RawMessage(`{"cpus": 1, "memory_mb": 256}`), Count: 3,
		Userdata: []string{held, failing, ""},
	})
	status := func(vm driversdk.VM, args string) string {
		t.Helper()
		return e.run(t, vm, "root", "cloud-init status "+args+"; echo rc=$?")
	}

	t.Run("running, then done", func(t *testing.T) {
		if got := status(vms[0], ""); got != "status: running\nrc=0" {
			t.Fatalf("cloud-init status while runcmd runs = %q", got)
		}
		if got := e.run(t, vms[0], "root", "test -e /run/cloud-init/status.json && test ! -e /run/cloud-init/result.json && echo ok"); got != "ok" {
			t.Fatalf("while running: status.json and no result.json, got %q", got)
		}
		e.run(t, vms[0], "root", "touch /run/go")
		got := status(vms[0], "--wait")
		if !strings.HasSuffix(got, "status: done\nrc=0") {
			t.Fatalf("cloud-init status --wait = %q, want done", got)
		}
		if out := e.run(t, vms[0], "root", "cat /root/held.out"); out != "finished" {
			t.Fatalf("--wait returned before runcmd finished: %q", out)
		}
		var res struct {
			V1 struct{ Errors []string } `json:"v1"`
		}
		if err := json.Unmarshal([]byte(e.run(t, vms[0], "root", "cat /run/cloud-init/result.json")), &res); err != nil || res.V1.Errors == nil || len(res.V1.Errors) != 0 {
			t.Fatalf("result.json = %+v (%v), want no errors", res, err)
		}
	})

	t.Run("error", func(t *testing.T) {
		got := status(vms[1], "--wait --long")
		for _, want := range []string{"status: error", "errors:", "runcmd", "exited with 4", "rc=1"} {
			if !strings.Contains(got, want) {
				t.Errorf("cloud-init status --wait --long lacks %q:\n%s", want, got)
			}
		}
		log := e.run(t, vms[1], "root", "cat /var/log/cloud-init-output.log")
		if !strings.Contains(log, "about-to-fail") || !strings.Contains(log, "exited with 4") {
			t.Errorf("cloud-init-output.log = %q", log)
		}
	})

	t.Run("no userdata", func(t *testing.T) {
		if got := status(vms[2], "--wait"); !strings.HasSuffix(got, "status: done\nrc=0") {
			t.Fatalf("cloud-init status --wait without userdata = %q", got)
		}
	})

	t.Run("other commands", func(t *testing.T) {
		if got := e.run(t, vms[2], "root", "cloud-init init 2>/dev/null; echo rc=$?"); got != "rc=3" {
			t.Fatalf("cloud-init init = %q, want exit 3", got)
		}
	})
}
