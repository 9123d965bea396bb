package keeper_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/keepertest"
)

// readyScenario makes one local VM with userdata, then reads on it what the
// userdata's runcmd writes last.
func readyScenario(userdata string) string {
	return `steps:
  - name: provision
    on: keeper
    module: core.cloud.created
    params:
      provider: local
      profile: {cpus: 1, memory_mb: 256}
      count: 1
      userdata: ` + jsonString(userdata) + `
  - name: use
    on: "${ steps.provision.output.hosts.map(h, h.sid) }"
    module: core.command.ran
    params: {cmd: "cat /var/lib/soulstack-ready-marker"}
    changed_when: false
`
}

// TestCloudSoulTargetedOnceReady is "ready means ready" through a real
// keeper, the real soul-cloud-local plugin and real local VMs, whose init
// reports its userdata the way cloud-init does:
//
//   - userdata whose runcmd sleeps before it writes the marker a later
//     step reads: the step waits for cloud-init to finish and reads the
//     marker (without the wait it runs while runcmd sleeps and fails);
//     the soul is then active, so no later step or run waits again;
//   - userdata that empties the VM's authorized keys before sshd starts
//     and writes the keeper's key only after a sleep: the step's dial
//     retries the refused key until cloud-init has written it;
//   - userdata whose runcmd fails: the step on the soul fails with
//     soul.cloud_init_failed and the last lines of the VM's
//     cloud-init-output.log, and the soul stays pending (never ready).
func TestCloudSoulTargetedOnceReady(t *testing.T) {
	requireLocalVMs(t)
	t.Parallel()
	s := spawn(t, keepertest.Options{Plugins: []string{localDriver}})
	c, data := s.Admin, s.Data
	ctx := context.Background()
	state := t.TempDir()
	if _, err := c.ProviderCreate(ctx, client.ProviderCreate{Name: "local", Driver: "local", FQDNSuffix: "ready.test", Config: map[string]any{"state_dir": state}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { destroyLocalVMs(t, filepath.Join(data, "plugins"), "ready.test", state) })

	pub, err := os.ReadFile(filepath.Join(data, "ssh", "id_ed25519.pub"))
	if err != nil {
		t.Fatal(err)
	}
	slow := "#cloud-config\nruncmd:\n  - sleep 3\n  - echo written-after-the-sleep > /var/lib/soulstack-ready-marker\n"
	// The VM's sshd answers at once but authorizes no key (the empty file
	// replaces the one the driver wrote, before sshd starts) until runcmd,
	// after its sleep, writes the keeper's: as on a cloud image whose
	// cloud-init writes the key while sshd already runs.
	lateKey := "#cloud-config\nwrite_files:\n  - path: /etc/soulstack-local/authorized_keys/root\n    content: \"\"\n" +
		"runcmd:\n  - sleep 3\n  - echo " + jsonString(strings.TrimSpace(string(pub))) + " > /etc/soulstack-local/authorized_keys/root\n" +
		"  - echo written-after-the-key > /var/lib/soulstack-ready-marker\n"
	broken := "#cloud-config\nruncmd:\n  - echo the-package-mirror-is-down\n  - exit 7\n"
	runs := map[string]string{}
	for name, ud := range map[string]string{"slow": slow, "late-key": lateKey, "broken": broken} {
		run, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: readyScenario(ud), File: name + ".yaml"})
		if err != nil {
			t.Fatal(err)
		}
		runs[name] = run.ID
	}

	t.Run("waits for cloud-init", func(t *testing.T) {
		final := waitRun(t, c, runs["slow"])
		if final.Phase != "Succeeded" || len(final.Steps) != 2 || len(final.Steps[1].Targets) != 1 {
			t.Fatalf("run = %s %+v\n%s", final.Phase, final.Error, describeSteps(final.Steps))
		}
		tg := final.Steps[1].Targets[0]
		var out struct{ Stdout string }
		if err := json.Unmarshal(tg.Output, &out); err != nil || out.Stdout != "written-after-the-sleep\n" {
			t.Fatalf("the step read %q (%v), want what runcmd wrote after its sleep", out.Stdout, err)
		}
		so, err := c.SoulGet(ctx, tg.SID)
		if err != nil || so.Status != "active" || so.LastSeenAt == nil {
			t.Fatalf("soul after a ready contact = %+v, %v; want active and seen", so, err)
		}
		waits := func(runID string) int {
			t.Helper()
			n := 0
			if err := c.RunEvents(ctx, runID, 0, func(e client.RunEvent) error {
				if e.Kind == "log" && e.SID == tg.SID && strings.Contains(string(e.Data), "waiting until its cloud-init has finished") {
					n++
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			return n
		}
		if n := waits(final.ID); n != 1 {
			t.Errorf("the run says %d times that it waits for the soul's cloud-init, want once", n)
		}
		// A later run on the soul, now active, does not wait again.
		again, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: "steps:\n  - name: again\n    on: " + tg.SID + "\n    module: core.command.ran\n    params: {cmd: \"true\"}\n", File: "again.yaml"})
		if err != nil {
			t.Fatal(err)
		}
		if fin := waitRun(t, c, again.ID); fin.Phase != "Succeeded" || waits(again.ID) != 0 {
			t.Fatalf("a later run on the ready soul = %s, waits %d; want Succeeded without a wait\n%s", fin.Phase, waits(again.ID), describeSteps(fin.Steps))
		}
	})

	t.Run("waits for the key", func(t *testing.T) {
		final := waitRun(t, c, runs["late-key"])
		if final.Phase != "Succeeded" || len(final.Steps) != 2 || len(final.Steps[1].Targets) != 1 {
			t.Fatalf("run = %s %+v\n%s", final.Phase, final.Error, describeSteps(final.Steps))
		}
		var out struct{ Stdout string }
		if err := json.Unmarshal(final.Steps[1].Targets[0].Output, &out); err != nil || out.Stdout != "written-after-the-key\n" {
			t.Fatalf("the step read %q (%v), want what runcmd wrote after the key", out.Stdout, err)
		}
	})

	t.Run("cloud-init failure is the target's error", func(t *testing.T) {
		final := waitRun(t, c, runs["broken"])
		if final.Phase != "Failed" || len(final.Steps) != 2 || len(final.Steps[1].Targets) != 1 {
			t.Fatalf("run = %s %+v\n%s", final.Phase, final.Error, describeSteps(final.Steps))
		}
		tg := final.Steps[1].Targets[0]
		if tg.Status != "failed" || tg.Error == nil || tg.Error.Code != "soul.cloud_init_failed" {
			t.Fatalf("target = %+v %+v, want failed with soul.cloud_init_failed", tg, tg.Error)
		}
		for _, want := range []string{"the-package-mirror-is-down", "exited with 7", "status: error"} {
			if !strings.Contains(tg.Error.Message, want) {
				t.Errorf("the error does not carry %q:\n%s", want, tg.Error.Message)
			}
		}
		so, err := c.SoulGet(ctx, tg.SID)
		if err != nil || so.Status != "pending" || so.LastSeenAt != nil {
			t.Fatalf("soul whose cloud-init failed = %+v, %v; want still pending", so, err)
		}
	})
}
