package keeper_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/drivers/hcloud/hcloudfake"
	"github.com/soulstack/soulstack/internal/sshtest"
)

// TestRunLogLinesNameTheRun: with log.format json, every line the keeper
// logs about a run carries the run's id under "run", also the lines a
// driver plugin logs during the run's calls. Two runs create servers at
// the same time through the real soul-cloud-hcloud plugin (against a fake
// of the Hetzner API); each "server created" line names the run the server
// was made for (the fake's run label), never the other one. A third run
// works over SSH; no line that mentions a run's id lacks its "run".
func TestRunLogLinesNameTheRun(t *testing.T) {
	t.Parallel()
	const token = "CANARY-runlog-hcloud-token-7a3e"
	fake := hcloudfake.New(token)
	t.Cleanup(fake.Close)
	dir := t.TempDir()
	data := filepath.Join(dir, ".keeper")
	plugins := filepath.Join(data, "plugins")
	if err := os.MkdirAll(plugins, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("go", "build", "-o", filepath.Join(plugins, "soul-cloud-hcloud"), "../../cmd/soul-cloud-hcloud").CombinedOutput(); err != nil {
		t.Fatalf("build soul-cloud-hcloud: %v\n%s", err, out)
	}
	tokenFile := filepath.Join(dir, "hcloud.token")
	cfg := filepath.Join(dir, "keeper.yml")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, []byte("log: {format: json}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	k := serve(t, dir, "--config", cfg)
	c := adminClient(t, k, data)
	ctx := context.Background()
	if _, err := c.ProviderCreate(ctx, client.ProviderCreate{Name: "hetzner", Driver: "hcloud", Region: "fsn1", FQDNSuffix: "hc.test",
		CredentialsRef: "file:" + tokenFile,
		Config:         map[string]any{"endpoint": fake.URL, "poll_interval": "5ms", "retry_base": "5ms"}}); err != nil {
		t.Fatal(err)
	}
	addSoul(t, c, "h.local.test", sshtest.Start(t, sshtest.Options{}))

	var ids []string
	for range 2 {
		run, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: readExample(t, "hcloud.yaml"), File: "hcloud.yaml",
			Input: map[string]any{"count": 2, "greet": false}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, run.ID)
	}
	run, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: `steps:
  - name: hello
    on: h.local.test
    module: core.command.ran
    params: {cmd: "echo hello"}
  - name: fails
    on: h.local.test
    module: core.command.ran
    params: {cmd: "exit 3"}
`})
	if err != nil {
		t.Fatal(err)
	}
	ids = append(ids, run.ID)
	for i, id := range ids {
		want := "Succeeded"
		if i == 2 {
			want = "Failed"
		}
		if final := waitRun(t, c, id); string(final.Phase) != want {
			t.Fatalf("run %s = %s, want %s: %+v\n%s", id, final.Phase, want, final.Error, describeSteps(final.Steps))
		}
	}
	logs := k.Interrupt(t)

	runOf := map[string]string{} // server id → the run that made it
	for _, s := range fake.Servers() {
		runOf[fmt.Sprint(s.ID)] = s.Labels["soulstack.run_id"]
	}
	created, finished := 0, 0
	for _, line := range strings.Split(logs, "\n") {
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("not a JSON line: %q (%v)", line, err)
		}
		got, _ := rec["run"].(string)
		for _, id := range ids {
			if strings.Contains(line, id) && got == "" {
				t.Errorf("a line about run %s does not name it under \"run\": %s", id, line)
			}
		}
		switch rec["msg"] {
		case "server created":
			created++
			if want := runOf[fmt.Sprint(rec["server_id"])]; got != want || want == "" {
				t.Errorf("the driver's line for server %v names run %q, the server was made for %q: %s", rec["server_id"], got, want, line)
			}
		case "run finished":
			finished++
			if !contains(ids, got) {
				t.Errorf("a run finished line names run %q: %s", got, line)
			}
		}
	}
	if created != 4 || finished != 3 {
		t.Fatalf("%d server created and %d run finished lines, want 4 and 3:\n%s", created, finished, logs)
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
