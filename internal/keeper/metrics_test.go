package keeper_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/sshtest"
)

// EnvPromtool names Prometheus's promtool, which scripts/test extracts
// from Debian's prometheus package; else promtool is looked up in PATH.
const EnvPromtool = "SOULSTACK_TEST_PROMTOOL"

func promtool(t *testing.T) string {
	t.Helper()
	if p := os.Getenv(EnvPromtool); p != "" {
		return p
	}
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("no promtool: run scripts/test, which extracts it from Debian's prometheus package, or set %s", EnvPromtool)
	}
	return p
}

// TestMetricsAfterRuns: after an apply run and a check run on an SSH
// soul, the keeper's /metrics counts them by mode and phase, times their
// work and their wait in the queue, counts their targets by module and
// status, says how many runs are unfinished and how many souls each
// project holds in each status, names its build, and passes promtool
// check metrics (Prometheus's own linter of an exposition).
func TestMetricsAfterRuns(t *testing.T) {
	t.Parallel()
	tool := promtool(t)
	dir := t.TempDir()
	k := serve(t, dir)
	data := filepath.Join(dir, ".keeper")
	c := adminClient(t, k, data)
	srv := sshtest.Start(t, sshtest.Options{})
	addSoul(t, c, "web-1.local.test", srv)
	ctx := context.Background()
	scenario := `name: metrics
steps:
  - name: hello
    on: web-1.local.test
    module: core.command.ran
    params: {cmd: "true"}
`
	for _, mode := range []client.RunMode{client.RunApply, client.RunCheck} {
		r, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: scenario, Mode: mode})
		if err != nil {
			t.Fatal(err)
		}
		if final := waitRun(t, c, r.ID); final.Phase != client.PhaseSucceeded {
			t.Fatalf("%s run: %s %+v", mode, final.Phase, final.Error)
		}
	}
	body := scrapeMetrics(t, k.Addr, data)
	for series, want := range map[string]float64{
		`soulstack_runs_created_total{mode="apply"}`:                                              1,
		`soulstack_runs_created_total{mode="check"}`:                                              1,
		`soulstack_runs_finished_total{mode="apply",phase="Succeeded"}`:                           1,
		`soulstack_runs_finished_total{mode="check",phase="Succeeded"}`:                           1,
		`soulstack_runs_finished_total{mode="apply",phase="Failed"}`:                              0,
		`soulstack_run_duration_seconds_count{mode="apply",phase="Succeeded"}`:                    1,
		`soulstack_run_queue_wait_seconds_count{mode="check"}`:                                    1,
		`soulstack_run_targets_total{module="core.command.ran",status="changed"}`:                 1,
		`soulstack_run_targets_total{module="core.command.ran",status="failed"}`:                  0,
		`soulstack_run_targets_total{module="core.command.ran",status="unknown"}`:                 1, // a command without a guard, checked
		`soulstack_run_targets_total{module="core.file.present",status="ok"}`:                     0,
		`soulstack_run_target_duration_seconds_count{module="core.command.ran"}`:                  2, // the apply and the check
		`soulstack_runs{phase="Pending"}`:                                                         0,
		`soulstack_runs{phase="Running"}`:                                                         0,
		`soulstack_souls{project="default",status="active"}`:                                      1,
		`soulstack_souls{project="default",status="unreachable"}`:                                 0,
		`soulstack_registry_up`:                                                                   1,
		`soulstack_ssh_dials_total{result="ok"}`:                                                  1, // one warm connection for both runs
		`soulstack_ssh_dials_total{result="ssh.unreachable"}`:                                     0,
		`soulstack_ssh_connections`:                                                               1,
		`soulstack_audit_events_total{action="run.started"}`:                                      2,
		`soulstack_audit_events_total{action="run.finished"}`:                                     2,
		`soulstack_http_requests_total{method="DELETE",operation="provider-delete",status="204"}`: 0, // from zero, before any request
	} {
		if got := metricValue(body, series); got != want {
			name, _, _ := strings.Cut(series, "{")
			t.Errorf("%s = %v, want %v\n%s", series, got, want, grepLines(body, name))
		}
	}
	for name, always := range exportedFamilies {
		if always && !strings.Contains(body, "# TYPE "+name+" ") {
			t.Errorf("/metrics has no %s family", name)
		}
	}
	if metricValue(body, "soulstack_audited_write_duration_seconds_count") < 5 {
		t.Errorf("audited writes timed:\n%s", grepLines(body, "soulstack_audited_write_duration_seconds_count"))
	}
	if !strings.Contains(body, `soulstack_build_info{goversion="go`) {
		t.Errorf("no soulstack_build_info:\n%s", grepLines(body, "build_info"))
	}
	check := exec.Command(tool, "check", "metrics")
	check.Stdin = strings.NewReader(body)
	if out, err := check.CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// TestAlertRules: docs/monitoring's alerting rules load in Prometheus
// (promtool check rules), pass their unit tests (promtool test rules),
// and alert on series the keeper exports (TestMetricsAfterRuns scrapes
// the same names).
func TestAlertRules(t *testing.T) {
	t.Parallel()
	tool := promtool(t)
	dir := filepath.Join("..", "..", "docs", "monitoring")
	for _, args := range [][]string{{"check", "rules", "alerts.yml"}, {"test", "rules", "alerts_test.yml"}} {
		cmd := exec.Command(tool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	rules, err := os.ReadFile(filepath.Join(dir, "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range alertedMetrics(string(rules)) {
		if _, ok := exportedFamilies[name]; !ok {
			t.Errorf("alerts.yml alerts on %s, which the keeper does not export (exportedFamilies)", name)
		}
	}
}

// alertedMetrics are the soulstack_ metric families rules names.
func alertedMetrics(rules string) []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range regexp.MustCompile(`soulstack_[a-z_]+`).FindAllString(rules, -1) {
		m = strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_count"), "_sum")
		if !seen[m] && m != "soulstack_keeper" {
			seen[m] = true
			out = append(out, m)
		}
	}
	return out
}

// exportedFamilies are the keeper's own metric families: true for those
// every /metrics has (TestMetricsAfterRuns checks a real keeper's), false
// for those that appear with their first labelled series.
var exportedFamilies = map[string]bool{
	"soulstack_build_info": true, "soulstack_runs_created_total": true, "soulstack_runs_finished_total": true,
	"soulstack_run_duration_seconds": true, "soulstack_run_queue_wait_seconds": true, "soulstack_run_targets_total": true,
	"soulstack_run_target_duration_seconds": true, "soulstack_runs": true, "soulstack_souls": true, "soulstack_registry_up": true,
	"soulstack_souls_drift": true, "soulstack_drift_changes_total": true,
	"soulstack_souls_joined_total": true, "soulstack_http_requests_total": true, "soulstack_http_request_duration_seconds": true,
	"soulstack_ssh_dials_total": true, "soulstack_ssh_connections": true,
	"soulstack_bus_agents": true, "soulstack_bus_heartbeats_total": true, "soulstack_bus_connections_refused_total": true,
	"soulstack_bus_callout_backlog": true, "soulstack_audited_write_duration_seconds": true, "soulstack_audit_events_total": true,
	// From the first call, delivery or VM on (labelled by driver,
	// notification or provider):
	"soulstack_driver_calls_total": false, "soulstack_driver_call_duration_seconds": false,
	"soulstack_notification_attempts_total": false, "soulstack_cloud_vms_total": false,
}

// TestDashboard: every query of docs/monitoring/dashboard.json is
// PromQL that Prometheus parses (promtool checks them as recording rules,
// Grafana's $__rate_interval and $instance filled in) and names only
// families the keeper exports.
func TestDashboard(t *testing.T) {
	t.Parallel()
	tool := promtool(t)
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "monitoring", "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	n := 0
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			expr := strings.NewReplacer("$__rate_interval", "5m", "$instance", ".*").Replace(q.Expr)
			n++
			fmt.Fprintf(&rules, "      - record: dashboard:query_%d\n        expr: %q\n", n, expr)
			for _, name := range alertedMetrics(q.Expr) {
				if _, ok := exportedFamilies[name]; !ok {
					t.Errorf("panel %q queries %s, which the keeper does not export", p.Title, name)
				}
			}
		}
	}
	file := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	if err := os.WriteFile(file, []byte(rules.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(tool, "check", "rules", file).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules of the dashboard's %d queries: %v\n%s", n, err, out)
	}
}
