package keeper_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/config"
	"github.com/soulstack/soulstack/internal/keepertest"
	"github.com/soulstack/soulstack/internal/promtest"
	"github.com/soulstack/soulstack/internal/sshtest"
)

// TestDriftSweep: keeper.yml's drift schedule sweeps by itself (a River
// periodic job): a soul whose seed was never applied is found drifted
// (pending) without anyone asking, the check changed nothing on the host,
// /metrics counts the soul under soulstack_souls_drift{project="default",state="drifted"}
// (another project's viewer counts none of them),
// and a soul.drifted webhook of project default reaches a receiver on
// loopback (another project's viewer lists none of its deliveries).
func TestDriftSweep(t *testing.T) {
	t.Parallel()
	srv := sshtest.Start(t, sshtest.Options{})
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "hook.secret")
	if err := os.WriteFile(secretFile, []byte("drift-hook-secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	hook := &receiver{secret: []byte("drift-hook-secret")}
	hook.listen(t, "127.0.0.1:0")
	k := keepertest.Start(t, func(c *config.Config) {
		c.Drift = config.Drift{Every: config.Duration(10 * time.Second), Jitter: "0%"}
		c.Notifications = []config.Notification{{URL: "http://" + hook.srv.Addr + "/", Events: []string{"soul.drifted"}, SecretRef: "file:" + secretFile}}
	})
	c := k.Client
	ctx := context.Background()
	if _, err := c.ProjectCreate(ctx, client.ProjectCreate{Name: "other"}); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(dir, "id")
	if err := os.WriteFile(key, srv.ClientKey, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SoulCreate(ctx, client.SoulCreate{SID: "web-1.drift.test", Address: srv.Addr,
		Connection: client.Connection{Transport: "ssh", User: srv.User, Port: srv.Port, KeyRef: "file:" + key}}); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(dir, "motd")
	if _, err := c.SeedAdd(ctx, "web-1.drift.test", client.SeedCreate{Scenario: `inputs:
  sid: {type: string}
steps:
  - name: motd
    on: "${ input.sid }"
    module: core.file.present
    params: {path: "` + target + `", content: "seeded\n"}
`}); err != nil {
		t.Fatal(err)
	}
	// A seed with a schedule of its own, on another soul, is left out of
	// the keeper-wide sweep and checked when it is due (within 30 s).
	if _, err := c.SoulCreate(ctx, client.SoulCreate{SID: "web-2.drift.test", Address: srv.Addr,
		Connection: client.Connection{Transport: "ssh", User: srv.User, Port: srv.Port, KeyRef: "file:" + key}}); err != nil {
		t.Fatal(err)
	}
	own, err := c.SeedAdd(ctx, "web-2.drift.test", client.SeedCreate{DriftEvery: "1h", Scenario: `inputs:
  sid: {type: string}
steps:
  - name: motd
    on: "${ input.sid }"
    module: core.file.present
    params: {path: "` + filepath.Join(dir, "own") + `", content: "own schedule\n"}
`})
	if err != nil || own.DriftEvery != "1h0m0s" {
		t.Fatalf("seed with drift_every: %+v, %v", own, err)
	}
	if _, err := c.SeedAdd(ctx, "web-2.drift.test", client.SeedCreate{DriftEvery: "5s", Scenario: "steps:\n  - name: x\n    on: \"${ input.sid }\"\n    module: core.command.ran\n    params: {cmd: \"true\"}\n"}); err == nil || !strings.Contains(err.Error(), "seed.drift_every_invalid") {
		t.Fatalf("drift_every 5s: %v, want seed.drift_every_invalid", err)
	}
	deadline := time.Now().Add(60 * time.Second)
	var rep *client.DriftReport
	for {
		var err error
		rep, err = c.Drift(ctx, "", client.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Items) == 2 && rep.Items[0].State == client.DriftDrifted && rep.Items[1].State == client.DriftDrifted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no sweep found the drift within 60 s: %+v", rep)
		}
		time.Sleep(500 * time.Millisecond)
	}
	sd := rep.Items[0].Seeds[0]
	if sd.Kind != "pending" || sd.RunID == "" || !strings.Contains(sd.Reason, "motd") || rep.Counts[client.DriftDrifted] != 2 {
		t.Fatalf("drift = %+v, counts %v", rep.Items[0], rep.Counts)
	}
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Fatalf("the sweep's check wrote %s: %v", target, err)
	}
	// Each soul's drift was notified, signed, once.
	deadline = time.Now().Add(20 * time.Second)
	for len(hook.events()) < 2 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if evs := hook.events(); len(evs) != 2 || evs[0].Event != "soul.drifted" || evs[1].Event != "soul.drifted" ||
		evs[0].Project != "default" || evs[1].Project != "default" {
		t.Fatalf("soul.drifted deliveries (of project default): %+v (refused %v)", evs, hook.bad)
	}
	req, _ := http.NewRequest(http.MethodGet, k.URL+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+k.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `soulstack_souls_drift{project="default",state="drifted"} 2`) ||
		!strings.Contains(string(body), `soulstack_souls_drift{project="default",state="in_sync"} 0`) ||
		!strings.Contains(string(body), `soulstack_souls_drift{project="other",state="drifted"} 0`) {
		t.Fatalf("/metrics has no drift gauge of the two drifted souls of default (and none of other's):\n%s", grepLines(string(body), "soulstack_souls_drift"))
	}
	// The keeper's bus counted what it committed: the check runs that
	// ended and the drift they recorded (the seed with its own schedule
	// may have been checked too), and nothing yet of what did not happen.
	if metricValue(string(body), `soulstack_drift_changes_total{to="drifted"}`) < 2 ||
		metricValue(string(body), `soulstack_runs_finished_total{mode="check",phase="Succeeded"}`) < 2 ||
		metricValue(string(body), `soulstack_runs_finished_total{mode="check",phase="Failed"}`) != 0 ||
		metricValue(string(body), `soulstack_souls_joined_total`) != 0 {
		t.Fatalf("/metrics does not count the sweep's runs and drift:\n%s\n%s\n%s", grepLines(string(body), "soulstack_drift_changes"),
			grepLines(string(body), "soulstack_runs_finished"), grepLines(string(body), "soulstack_souls_joined"))
	}
	// Another project's viewer counts its own souls alone: none drifted.
	tok, err := c.TokenCreate(ctx, client.TokenCreate{Name: "other-viewer", Role: "viewer", Project: "other"})
	if err != nil {
		t.Fatal(err)
	}
	other, _ := client.New(k.URL, tok.Token)
	if rep, err := other.Drift(ctx, "", client.ListOptions{}); err != nil || len(rep.Items) != 0 || rep.Counts[client.DriftDrifted] != 0 {
		t.Fatalf("another project's drift report: %+v, %v; want no soul and no count of default's", rep, err)
	}
	// The delivery log: default's deliveries are default's, and the other
	// project's viewer lists none of them.
	if log, err := c.Deliveries(ctx, client.ListOptions{}); err != nil || len(log.Items) != 2 ||
		log.Items[0].Project != "default" || log.Items[1].Project != "default" {
		t.Fatalf("the keeper admin's delivery log: %+v, %v", log, err)
	}
	if log, err := other.Deliveries(ctx, client.ListOptions{}); err != nil || len(log.Items) != 0 {
		t.Fatalf("another project's delivery log: %+v, %v; want none of default's", log, err)
	}
}

// metricValue is the value of one series in a Prometheus exposition, -1
// when it is absent.
func metricValue(exposition, series string) float64 { return promtest.Value(exposition, series) }

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
