package keeper_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/soulstack/soulstack/client"
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
	k, c, fake := hcloudKeeper(t, "CANARY-runlog-hcloud-token-7a3e", "log: {format: json}\n")
	ctx := context.Background()
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
			if !slices.Contains(ids, got) {
				t.Errorf("a run finished line names run %q: %s", got, line)
			}
		}
	}
	if created != 4 || finished != 3 {
		t.Fatalf("%d server created and %d run finished lines, want 4 and 3:\n%s", created, finished, logs)
	}
}
