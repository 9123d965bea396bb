package keeper_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/driversdk"
	"github.com/soulstack/soulstack/internal/keepertest"
	"github.com/soulstack/soulstack/internal/sshtest"
)

// TestProjectQuotasAndSharing: against a real keeper with the real
// soul-cloud-local plugin, on SQLite and PostgreSQL. Project a owns a
// provider and a profile and shares them with project b to use; b's admin
// sees them but cannot delete them or share them on, and creates VMs with
// them: the souls are b's and a cannot reach them. b has a quota of 2
// VMs: two concurrent creates of 2 VMs each cannot both fit, exactly one
// makes its VMs and the other fails with quota.exceeded without a VM
// asked for; the cloud drift of the provider is a's, and names none of
// b's souls; once the VMs are destroyed the quota is free again. A quota
// of one unfinished run refuses a second run while the first goes.
func TestProjectQuotasAndSharing(t *testing.T) {
	requireLocalVMs(t)
	t.Parallel()
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			// Every VM create is a webhook delivery of the creating project.
			secretFile := filepath.Join(dir, "hook.secret")
			if err := os.WriteFile(secretFile, []byte("quota-hook-secret"), 0o600); err != nil {
				t.Fatal(err)
			}
			hook := &receiver{secret: []byte("quota-hook-secret")}
			hook.listen(t, "127.0.0.1:0")
			s := spawn(t, keepertest.Options{Dir: dir, Postgres: backend == "postgres", Plugins: []string{localDriver},
				YAML: "notifications:\n  - url: http://" + hook.srv.Addr + "/\n    events: [cloud.provisioned]\n    secret_ref: file:" + secretFile + "\n"})
			k, admin, data := s.Proc, s.Admin, s.Data
			suffix := "quota-" + backend + ".test"
			state := t.TempDir()
			t.Cleanup(func() { destroyLocalVMs(t, filepath.Join(data, "plugins"), suffix, state) })
			quotasAndSharing(t, k, admin, filepath.Join(data, "plugins"), suffix, state)
		})
	}
}

func quotasAndSharing(t *testing.T, k *proc, admin *client.Client, plugins, suffix, state string) {
	ctx := context.Background()
	for _, p := range []string{"a", "b"} {
		if _, err := admin.ProjectCreate(ctx, client.ProjectCreate{Name: p}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.ProviderCreate(ctx, client.ProviderCreate{Name: "local", Driver: "local", FQDNSuffix: suffix, Project: "a",
		Config: map[string]any{"state_dir": state, "max_count": 3}}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.ProfileCreate(ctx, client.ProfileCreate{Name: "small", Provider: "local", Project: "a", Spec: map[string]any{"cpus": 1, "memory_mb": 256}}); err != nil {
		t.Fatal(err)
	}
	mint := func(project string) *client.Client {
		tok, err := admin.TokenCreate(ctx, client.TokenCreate{Name: project + "-admin", Role: "admin", Project: project})
		if err != nil {
			t.Fatal(err)
		}
		c, _ := client.New(k.Addr, tok.Token)
		return c
	}
	adminA, adminB := mint("a"), mint("b")

	// Not shared yet: b cannot see or use them.
	_, err := adminB.ProviderGet(ctx, "local")
	wantProblem(t, err, http.StatusNotFound, "provider.not_found")
	run, _ := cloudStep(t, adminB, "core.cloud.created", "{provider: local, profile: small, count: 1}")
	if run.Phase != client.PhaseFailed || !strings.Contains(describeSteps(run.Steps), "provider.not_found") {
		t.Fatalf("b creates with a's provider before the share: %s\n%s", run.Phase, describeSteps(run.Steps))
	}

	// a shares; b may use, never manage.
	_, err = adminB.ProviderShare(ctx, "local", "b")
	wantProblem(t, err, http.StatusNotFound, "provider.not_found")
	if p, err := adminA.ProviderShare(ctx, "local", "b"); err != nil || len(p.SharedWith) != 1 || p.SharedWith[0] != "b" {
		t.Fatalf("share the provider: %+v, %v", p, err)
	}
	if _, err := adminA.ProfileShare(ctx, "small", "b"); err != nil {
		t.Fatal(err)
	}
	seen, err := adminB.ProviderGet(ctx, "local")
	if err != nil || seen.Project != "a" || len(seen.SharedWith) != 0 {
		t.Fatalf("b reads the shared provider (without a's list of shares): %+v, %v", seen, err)
	}
	wantProblem(t, adminB.ProviderDelete(ctx, "local"), http.StatusForbidden, "auth.forbidden", "not to manage")
	wantProblem(t, adminB.ProfileDelete(ctx, "small"), http.StatusForbidden, "auth.forbidden", "not to manage")
	_, err = adminB.ProviderShare(ctx, "local", "default")
	wantProblem(t, err, http.StatusForbidden, "auth.forbidden")

	if _, err := admin.ProjectSetQuota(ctx, "b", client.Quota{VMs: 2, VCPUs: 2}); err != nil {
		t.Fatal(err)
	}
	// Two creates of 2 VMs at once: the quota holds 2.
	var wg sync.WaitGroup
	runs := make([]*client.Run, 2)
	for i := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, _, err := adminB.RunCreate(ctx, client.RunCreate{Scenario: "steps:\n  - name: cloud\n    on: keeper\n    module: core.cloud.created\n    params: {provider: local, profile: small, count: 2}\n"})
			if err != nil {
				t.Error(err)
				return
			}
			runs[i] = r
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	var ok, refused int
	for _, r := range runs {
		done := waitRunFor(t, adminB, r.ID, 4*time.Minute)
		switch {
		case done.Phase == client.PhaseSucceeded:
			ok++
		case done.Phase == client.PhaseFailed && strings.Contains(describeSteps(done.Steps), "quota.exceeded"):
			refused++
		default:
			t.Fatalf("create: %s\n%s", done.Phase, describeSteps(done.Steps))
		}
	}
	if ok != 1 || refused != 1 {
		t.Fatalf("of two concurrent creates %d succeeded and %d were refused; want one each", ok, refused)
	}
	souls, err := adminB.SoulList(ctx, client.ListOptions{})
	if err != nil || len(souls.Items) != 2 {
		t.Fatalf("b's souls: %+v, %v", souls, err)
	}
	vmIDs := []string{}
	sids := []string{}
	for _, so := range souls.Items {
		if so.Project != "b" || so.Provider != "local" {
			t.Fatalf("a soul b made with a's provider: %+v", so)
		}
		vmIDs, sids = append(vmIDs, so.VMID), append(sids, so.SID)
	}
	if n := countLocalVMs(t, plugins, suffix, state); n != 2 {
		t.Fatalf("the driver holds %d VMs; the refused create must have asked for none", n)
	}
	// a owns the provider but not b's souls, nor the deliveries about them.
	if l, err := adminA.SoulList(ctx, client.ListOptions{}); err != nil || len(l.Items) != 0 {
		t.Fatalf("a's souls: %+v, %v", l, err)
	}
	// b's three cloud steps so far (refused before the share, refused by
	// the quota, made): each a delivery of b's, queued with its audit
	// event and queued for delivery by the run queue right after.
	deadline := time.Now().Add(15 * time.Second)
	for {
		l, err := adminB.Deliveries(ctx, client.ListOptions{})
		if err == nil && len(l.Items) == 3 &&
			!slices.ContainsFunc(l.Items, func(d client.Delivery) bool { return d.Event != "cloud.provisioned" || d.Project != "b" }) {
			break
		}
		if err != nil || len(l.Items) > 3 || time.Now().After(deadline) {
			t.Fatalf("b's deliveries after its creates: %+v, %v", l, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if l, err := adminA.Deliveries(ctx, client.ListOptions{}); err != nil || len(l.Items) != 0 {
		t.Fatalf("a's deliveries (b made the VMs): %+v, %v", l, err)
	}
	// The cloud drift of a's provider is a's to read: b's VMs on it are
	// owned (no orphans) and b's souls are not named to a; b, which only
	// uses the provider, does not answer for its VMs.
	for _, name := range []string{"local", ""} {
		cd, err := adminA.CloudDriftOf(ctx, name)
		if err != nil || len(cd.Providers) != 1 || cd.Providers[0].Provider != "local" || !cd.Providers[0].Listable ||
			len(cd.Providers[0].Orphans) != 0 || len(cd.Providers[0].Missing) != 0 {
			t.Fatalf("a's cloud drift (provider %q): %+v, %v", name, cd, err)
		}
		if b, _ := json.Marshal(cd); strings.Contains(string(b), sids[0]) || strings.Contains(string(b), sids[1]) {
			t.Fatalf("a's cloud drift names b's souls: %s", b)
		}
	}
	_, err = adminB.CloudDriftOf(ctx, "local")
	wantProblem(t, err, http.StatusForbidden, "auth.forbidden", "not to answer for its VMs")
	if cd, err := adminB.CloudDriftOf(ctx, ""); err != nil || len(cd.Providers) != 0 {
		t.Fatalf("b's cloud drift (it owns no provider): %+v, %v", cd, err)
	}
	if cd, err := admin.CloudDriftOf(ctx, "local"); err != nil || len(cd.Providers) != 1 || len(cd.Providers[0].Orphans) != 0 {
		t.Fatalf("the keeper admin's cloud drift: %+v, %v", cd, err)
	}
	run, _ = cloudStep(t, adminA, "core.cloud.destroyed", "{provider: local, vm_ids: "+jsonList(vmIDs)+", sids: "+jsonList(sids)+"}")
	if run.Phase != client.PhaseFailed || !strings.Contains(describeSteps(run.Steps), "cloud.pairing_mismatch") {
		t.Fatalf("a destroys b's VMs: %s\n%s", run.Phase, describeSteps(run.Steps))
	}
	run, _ = cloudStep(t, adminB, "core.cloud.created", "{provider: local, profile: small, count: 1}")
	if run.Phase != client.PhaseFailed || !strings.Contains(describeSteps(run.Steps), "quota.exceeded") {
		t.Fatalf("a third VM: %s\n%s", run.Phase, describeSteps(run.Steps))
	}
	// Growing the VMs counts as creating does: 2 more vCPUs under a quota
	// of 2 in use is refused before the driver is asked.
	run, _ = cloudStep(t, adminB, "core.cloud.resized", "{provider: local, vm_ids: "+jsonList(vmIDs)+", profile: {cpus: 2, memory_mb: 256}}")
	if run.Phase != client.PhaseFailed || !strings.Contains(describeSteps(run.Steps), "quota.exceeded") || !strings.Contains(describeSteps(run.Steps), "no VM was resized") {
		t.Fatalf("b grows its VMs past its vCPU quota: %s\n%s", run.Phase, describeSteps(run.Steps))
	}
	run, _ = cloudStep(t, adminB, "core.cloud.destroyed", "{provider: local, vm_ids: "+jsonList(vmIDs)+", sids: "+jsonList(sids)+"}")
	if run.Phase != client.PhaseSucceeded {
		t.Fatalf("b destroys its VMs: %s\n%s", run.Phase, describeSteps(run.Steps))
	}
	run, _ = cloudStep(t, adminB, "core.cloud.created", "{provider: local, profile: small, count: 2}")
	if run.Phase != client.PhaseSucceeded {
		t.Fatalf("after the destroy the quota is free: %s\n%s", run.Phase, describeSteps(run.Steps))
	}

	// Runs: one at a time.
	if _, err := admin.ProjectSetQuota(ctx, "a", client.Quota{Runs: 1}); err != nil {
		t.Fatal(err)
	}
	addSoulIn(t, admin, "slow.a.test", "a", sshtest.Start(t, sshtest.Options{})) // a file: key_ref is a keeper admin's to write
	slow, _, err := adminA.RunCreate(ctx, client.RunCreate{Scenario: "steps:\n  - name: s\n    on: slow.a.test\n    module: core.command.ran\n    params: {cmd: \"sleep 4\"}\n"})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = adminA.RunCreate(ctx, client.RunCreate{Scenario: "steps:\n  - name: s\n    on: slow.a.test\n    module: core.command.ran\n    params: {cmd: \"true\"}\n"})
	wantProblem(t, err, http.StatusConflict, "quota.exceeded", "runs")
	if done := waitRun(t, adminA, slow.ID); done.Phase != client.PhaseSucceeded {
		t.Fatalf("the slow run: %s\n%s", done.Phase, describeSteps(done.Steps))
	}
	if _, _, err := adminA.RunCreate(ctx, client.RunCreate{Scenario: "steps:\n  - name: s\n    on: slow.a.test\n    module: core.command.ran\n    params: {cmd: \"true\"}\n"}); err != nil {
		t.Fatalf("once the run ended the quota is free: %v", err)
	}
	// Every share is in the owner's audit.
	evs, err := adminA.AuditList(ctx, client.AuditListOptions{ListOptions: client.ListOptions{Limit: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	shares := 0
	for _, e := range evs.Items {
		if e.Action == "share.added" {
			shares++
		}
	}
	if shares != 2 {
		t.Fatalf("a's audit has %d share.added; want 2", shares)
	}
	// What b's runs did with a's provider, refused creates included, is
	// in b's audit, not in a's (the provider's owner).
	cloudEvents := func(c *client.Client) (outcomes map[string]int, runs []string) {
		evs, err := c.AuditList(ctx, client.AuditListOptions{ListOptions: client.ListOptions{Limit: 1000}})
		if err != nil {
			t.Fatal(err)
		}
		outcomes = map[string]int{}
		for _, e := range evs.Items {
			if e.Action != "cloud.provisioned" {
				continue
			}
			var p struct {
				Outcome string `json:"outcome"`
				RunID   string `json:"run_id"`
			}
			if err := json.Unmarshal(e.Payload, &p); err != nil {
				t.Fatal(err)
			}
			outcomes[p.Outcome]++
			runs = append(runs, p.RunID)
		}
		return outcomes, runs
	}
	outB, runsB := cloudEvents(adminB)
	if outB["failed"] < 3 || outB["ok"] < 3 {
		t.Fatalf("b's audit of its creates and destroys: %v", outB)
	}
	_, runsA := cloudEvents(adminA)
	for _, id := range runsA {
		if slices.Contains(runsB, id) {
			t.Fatalf("a's audit holds cloud.provisioned of b's run %s", id)
		}
	}
}

func jsonList(l []string) string { return `["` + strings.Join(l, `", "`) + `"]` }

// countLocalVMs is how many VMs the local driver holds in state.
func countLocalVMs(t *testing.T, pluginDir, suffix, state string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := 0
	if err := withLocalDriver(ctx, pluginDir, suffix, state, func(d driversdk.Driver, p driversdk.Provider) error {
		vms, err := d.List(ctx, driversdk.ListRequest{Provider: p})
		n = len(vms)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return n
}
