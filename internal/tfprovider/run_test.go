package tfprovider_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/sshtest"
)

// host is a real sshd registered as a soul through the provider.
type host struct {
	sid  string
	soul *state
}

// registerHost starts an sshd and registers it with soulstack_soul.
func registerHost(t *testing.T, k *testKeeper, h *tf, sid string) host {
	t.Helper()
	s := sshtest.Start(t, sshtest.Options{})
	keyFile := filepath.Join(t.TempDir(), "id_ed25519")
	if err := os.WriteFile(keyFile, s.ClientKey, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := map[string]any{"sid": sid, "address": s.Addr, "user": s.User, "port": s.Port, "key_ref": "file:" + keyFile}
	soul, d := h.apply("soulstack_soul", nil, cfg)
	if d != "" {
		t.Fatal(d)
	}
	a := soul.attrs()
	if a["id"] != sid || a["port"] != int64(s.Port) || a["user"] != s.User || a["status"] == nil {
		t.Fatalf("soul state: %v", a)
	}
	if p := h.plan("soulstack_soul", soul, cfg); p.errs != "" || len(p.replace) != 0 {
		t.Fatalf("no-change soul plan: %v %s", p.replace, p.errs)
	}
	imp, d := h.importState("soulstack_soul", sid)
	if d != "" {
		t.Fatal(d)
	}
	if p := h.plan("soulstack_soul", imp, cfg); p.errs != "" || len(p.replace) != 0 {
		t.Fatalf("plan after importing the soul: %v %s", p.replace, p.errs)
	}
	return host{sid: sid, soul: soul}
}

// writeScenario writes a scenario file into dir.
func writeScenario(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const marker = `name: marker
inputs:
  host: {type: string}
  dir: {type: string}
  db_password: {type: string, secret: true, required: false}
  api_token: {type: string, required: false}
steps:
  - name: write
    on: "${ input.host }"
    module: core.command.ran
    params:
      argv: [sh, -c, 'echo "run $2 $3" >> "$1/runs"; echo "$2 $3"', sh, "${ input.dir }", "${ has(input.db_password) ? input.db_password : 'none' }", "${ has(input.api_token) ? input.api_token : 'none' }"]
  - name: count
    on: "${ input.host }"
    module: core.command.ran
    params:
      cmd: "wc -l < ${ input.dir }/runs"
    changed_when: false
`

const undo = `name: undo
inputs:
  write: {type: object}
  count: {type: object}
steps:
  - name: undo
    on: "${ input.write.map(sid, sid) }"
    module: core.command.ran
    params:
      cmd: "true"
`

func TestRuns(t *testing.T) {
	t.Parallel()
	k := startKeeper(t)
	h := connect(t, k)
	hst := registerHost(t, k, h, "db-1.example.test")
	dir := t.TempDir()
	file := writeScenario(t, dir, "marker.yaml", marker)
	ctx := context.Background()

	t.Run("souls_data_source", func(t *testing.T) {
		got, d := h.data("soulstack_souls", map[string]any{})
		if d != "" {
			t.Fatal(d)
		}
		souls := got["souls"].([]any)
		if len(souls) != 1 || souls[0].(map[string]any)["sid"] != hst.sid {
			t.Fatalf("souls: %v", souls)
		}
		got, _ = h.data("soulstack_souls", map[string]any{"status": "destroyed"})
		if n := len(got["souls"].([]any)); n != 0 {
			t.Fatalf("destroyed souls: %d", n)
		}
		got, _ = h.data("soulstack_souls", map[string]any{"provider_name": "local"})
		if n := len(got["souls"].([]any)); n != 0 {
			t.Fatalf("souls of provider local: %d", n)
		}
	})

	const secretPW = "pw-Zq8x-s3cr3t-value"
	const secretTok = "tok-Hh2-9f8e7d6c5b"
	input := `{"host": "` + hst.sid + `", "dir": "` + dir + `"}`
	cfg := map[string]any{
		"scenario":            file,
		"input":               input,
		"sensitive_input":     `{"db_password": "` + secretPW + `", "api_token": "` + secretTok + `"}`,
		"run_id":              "1",
		"on_destroy_scenario": undo,
	}
	before := k.runCount(t)
	run, d := h.apply("soulstack_run", nil, cfg)
	if d != "" {
		t.Fatal(d)
	}
	a := run.attrs()
	if a["phase"] != "Succeeded" || !strings.HasPrefix(a["id"].(string), "run_") || a["wait_timeout_sec"] != int64(900) {
		t.Fatalf("run state: %v", a)
	}
	steps := a["steps"].(map[string]any)
	if steps["write"] != "changed" || steps["count"] != "ok" {
		t.Fatalf("steps: %v", steps)
	}
	var outputs map[string]map[string]map[string]any
	if err := json.Unmarshal([]byte(a["outputs"].(string)), &outputs); err != nil {
		t.Fatalf("outputs %q: %v", a["outputs"], err)
	}
	if out := outputs["count"][hst.sid]["stdout"]; !strings.Contains(out.(string), "1") {
		t.Fatalf("count output: %v", outputs)
	}
	if a["message"] == "" || !json.Valid([]byte(a["message"].(string))) {
		t.Fatalf("message: %q", a["message"])
	}
	if n := k.runCount(t); n != before+1 {
		t.Fatalf("runs: %d, want %d", n, before+1)
	}

	t.Run("secrets", func(t *testing.T) {
		for _, v := range []string{secretPW, secretTok} {
			if strings.Contains(a["outputs"].(string), v) || strings.Contains(a["message"].(string), v) {
				t.Errorf("a secret is in the run's outputs or message in state")
			}
			if strings.Contains(h.providerLog(), v) {
				t.Errorf("a secret is in the provider log")
			}
			if strings.Contains(k.Logs.String(), v) {
				t.Errorf("a secret is in the keeper log")
			}
			got, err := k.C.RunGet(ctx, run.str("id"))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(got)
			if strings.Contains(string(b), v) {
				t.Errorf("a secret is in the keeper's answer: %s", b)
			}
		}
		if strings.Contains(h.providerLog(), k.Token) {
			t.Errorf("the API token is in the provider log")
		}
		if !strings.Contains(a["outputs"].(string), "***") {
			t.Errorf("outputs are not masked: %s", a["outputs"])
		}
		if !strings.Contains(h.providerLog(), "starting run") {
			t.Errorf("the provider log is empty or not captured")
		}
		// A key the keeper would show is refused before anything runs.
		bad := map[string]any{"scenario": file, "input": `{"host": "x"}`, "sensitive_input": `{"dir": "` + secretPW + `"}`}
		p := h.plan("soulstack_run", nil, bad)
		if !strings.Contains(p.errs, "would not stay secret") || !strings.Contains(p.errs, "dir") || strings.Contains(p.errs, secretPW) {
			t.Errorf("sensitive_input under a plain key: %q", p.errs)
		}
	})

	t.Run("no_change", func(t *testing.T) {
		fresh, d := h.read(run)
		if d != "" {
			t.Fatal(d)
		}
		if !fresh.v.Equal(run.v) {
			t.Fatalf("read changed the state:\n%v\n%v", fresh.attrs(), run.attrs())
		}
		p := h.plan("soulstack_run", fresh, cfg)
		if p.errs != "" || len(p.replace) != 0 || !p.v.Equal(fresh.v) {
			t.Fatalf("no-change plan: replace %v errs %s", p.replace, p.errs)
		}
		// wait_timeout_sec changes in place, without a run.
		c2 := clone(cfg)
		c2["wait_timeout_sec"] = 60
		next, d := h.apply("soulstack_run", fresh, c2)
		if d != "" || next.str("id") != run.str("id") || next.attrs()["wait_timeout_sec"] != int64(60) {
			t.Fatalf("in-place update: %v %s", next.attrs(), d)
		}
		if n := k.runCount(t); n != before+1 {
			t.Fatalf("runs after no-change apply: %d, want %d", n, before+1)
		}
	})

	t.Run("data_source", func(t *testing.T) {
		got, d := h.data("soulstack_run", map[string]any{"id": run.str("id")})
		if d != "" {
			t.Fatal(d)
		}
		if got["phase"] != "Succeeded" || got["name"] != "marker" || got["steps"].(map[string]any)["write"] != "changed" {
			t.Fatalf("data soulstack_run: %v", got)
		}
	})

	// Bumping run_id plans a replacement and runs exactly once more; the
	// replaced run's on_destroy_scenario runs too.
	bumped := clone(cfg)
	bumped["run_id"] = "2"
	p := h.plan("soulstack_run", run, bumped)
	if len(p.replace) == 0 || !strings.Contains(strings.Join(p.replace, " "), "run_id") {
		t.Fatalf("bumped run_id: replace %v errs %s", p.replace, p.errs)
	}
	n0 := k.runCount(t)
	run2, d := h.apply("soulstack_run", run, bumped)
	if d != "" {
		t.Fatal(d)
	}
	if run2.str("id") == run.str("id") || run2.str("phase") != "Succeeded" {
		t.Fatalf("after bump: %v", run2.attrs())
	}
	// One new run plus the on_destroy run of the replaced one.
	if n := k.runCount(t); n != n0+2 {
		t.Fatalf("runs after bump: %d, want %d", n, n0+2)
	}
	data, _ := os.ReadFile(filepath.Join(dir, "runs"))
	if got := strings.Count(string(data), "run "); got != 2 {
		t.Fatalf("the scenario ran %d times, want 2:\n%s", got, data)
	}
	assertUndo(t, k, run.str("id"))

	t.Run("scenario_file_edited", func(t *testing.T) {
		writeScenario(t, dir, "marker.yaml", marker+"# edited\n")
		p := h.plan("soulstack_run", run2, bumped)
		if !strings.Contains(strings.Join(p.replace, " "), "scenario_digest") {
			t.Fatalf("edited scenario file: replace %v errs %s", p.replace, p.errs)
		}
		writeScenario(t, dir, "marker.yaml", marker)
	})

	t.Run("sensitive_input_changed", func(t *testing.T) {
		c2 := clone(bumped)
		c2["sensitive_input"] = `{"db_password": "another-pw-771", "api_token": "` + secretTok + `"}`
		p := h.plan("soulstack_run", run2, c2)
		if len(p.replace) == 0 {
			t.Fatalf("changed sensitive_input: no replacement")
		}
		// Same run_id, other secret: the keeper gets a new key, not a 409.
		run3, d := h.apply("soulstack_run", nil, c2)
		if d != "" || run3.str("phase") != "Succeeded" || run3.str("id") == run2.str("id") {
			t.Fatalf("run with a changed secret: %v %s", run3.attrs(), d)
		}
	})

	t.Run("input_changed", func(t *testing.T) {
		c2 := clone(bumped)
		c2["input"] = `{"host": "` + hst.sid + `", "dir": "` + dir + `/"}`
		if p := h.plan("soulstack_run", run2, c2); len(p.replace) == 0 {
			t.Fatalf("changed input: no replacement")
		}
	})

	// Destroy runs on_destroy_scenario with the outputs as input.
	n1 := k.runCount(t)
	if d := h.destroy(run2); d != "" {
		t.Fatal(d)
	}
	if n := k.runCount(t); n != n1+1 {
		t.Fatalf("runs after destroy: %d, want %d", n, n1+1)
	}
	assertUndo(t, k, run2.str("id"))

	if d := h.destroy(hst.soul); d != "" {
		t.Fatal(d)
	}
}

// assertUndo checks that the on_destroy run of run id ran and succeeded
// with the outputs as input.
func assertUndo(t *testing.T, k *testKeeper, id string) {
	t.Helper()
	page, err := k.C.RunList(context.Background(), client.RunListOptions{ListOptions: client.ListOptions{Limit: 100}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range page.Items {
		if r.Key != "tf-destroy-"+id {
			continue
		}
		full, err := k.C.RunGet(context.Background(), r.ID)
		if err != nil {
			t.Fatal(err)
		}
		if full.Phase != "Succeeded" || !strings.Contains(string(full.Input), `"write"`) {
			t.Fatalf("on_destroy run: %s %s", full.Phase, full.Input)
		}
		return
	}
	t.Fatalf("no on_destroy run for %s", id)
}

func clone(m map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

func TestRunFailures(t *testing.T) {
	t.Parallel()
	k := startKeeper(t)
	h := connect(t, k)
	hst := registerHost(t, k, h, "web-1.example.test")
	dir := t.TempDir()

	t.Run("failed", func(t *testing.T) {
		file := writeScenario(t, dir, "fail.yaml", `name: fail
steps:
  - name: boom
    on: `+hst.sid+`
    module: core.command.ran
    params: {cmd: "echo oops >&2; exit 3"}
`)
		st, d := h.apply("soulstack_run", nil, map[string]any{"scenario": file})
		for _, want := range []string{`step "boom"`, hst.sid, "command.failed", "Failed", "Bump run_id"} {
			if !strings.Contains(d, want) {
				t.Errorf("diagnostic lacks %q:\n%s", want, d)
			}
		}
		// The failed run stays in the state (terraform taints it), its
		// message the error as the seed's job has it, the outputs apart.
		if st == nil || st.str("phase") != "Failed" || st.attrs()["steps"].(map[string]any)["boom"] != "failed" {
			t.Fatalf("state after a failed run: %v", st.attrs())
		}
		if want := "boom on " + hst.sid + ": command.failed: exit status 3: oops"; st.str("message") != want {
			t.Errorf("message = %q, want %q", st.str("message"), want)
		}
		if !json.Valid([]byte(st.str("outputs"))) {
			t.Errorf("outputs = %q", st.str("outputs"))
		}
	})

	t.Run("timeout", func(t *testing.T) {
		st, d := h.apply("soulstack_run", nil, map[string]any{"wait_timeout_sec": 1, "scenario": `name: slow
steps:
  - name: sleep
    on: ` + hst.sid + `
    module: core.command.ran
    params: {cmd: "sleep 4"}
`})
		if !strings.Contains(d, "did not finish in time") || !strings.Contains(d, "wait_timeout_sec=1") {
			t.Fatalf("timeout diagnostic: %q", d)
		}
		if st == nil || st.str("id") == "" {
			t.Fatal("no state after a timeout")
		}
		r, err := k.C.RunGet(context.Background(), st.str("id"))
		if err != nil || client.Terminal(r.Phase) {
			t.Fatalf("the run should still be visible and going: %+v %v", r, err)
		}
		if !strings.Contains(d, st.str("id")) {
			t.Fatalf("the diagnostic does not name the run: %q", d)
		}
	})

	t.Run("invalid_scenario", func(t *testing.T) {
		file := writeScenario(t, dir, "bad.yaml", `name: bad
steps:
  - name: one
    on: keeper
    module: core.nothing.here
  - name: two
    on: `+hst.sid+`
    module: core.command.ran
    params: {nope: 1}
`)
		_, d := h.apply("soulstack_run", nil, map[string]any{"scenario": file})
		for _, want := range []string{"scenario.invalid", file + ":5:", file + ":9:", `[at AttributeName("scenario")]`, "nothing ran"} {
			if !strings.Contains(d, want) {
				t.Errorf("diagnostic lacks %q:\n%s", want, d)
			}
		}
		_, d = h.apply("soulstack_run", nil, map[string]any{"scenario": "steps:\n  - name: x\n    on: keeper\n    module: core.nothing.here\n"})
		if !strings.Contains(d, "inline.yaml:4:") {
			t.Errorf("inline scenario diagnostic:\n%s", d)
		}
		p := h.plan("soulstack_run", nil, map[string]any{"scenario": filepath.Join(dir, "missing.yaml")})
		if !strings.Contains(p.errs, "read scenario file") {
			t.Errorf("missing file: %q", p.errs)
		}
	})
}
