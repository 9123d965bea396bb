package keeper_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/agent/wire"
	"github.com/soulstack/soulstack/internal/bus/bustest"
	"github.com/soulstack/soulstack/internal/config"
	"github.com/soulstack/soulstack/internal/pki"
	"github.com/soulstack/soulstack/internal/sshtest"
)

// floodBytes is what each soul of TestSoulFloodKeepsTheKeeperSmall sends:
// the ~200 MiB that took a keeper to 6 GB.
const floodBytes = 200 << 20

// maxFloodRSS is the peak resident memory the keeper may reach while
// three souls flood it together (docs/performance.md has the figures).
const maxFloodRSS = 400 << 20

// TestSoulFloodKeepsTheKeeperSmall: three souls answer one step with
// ~200 MiB of stdout each — a real agent process (which cuts it to its
// max_output itself), a real sshd, and a raw NATS client under a real
// soul identity that ignores the limit the keeper asked for. The keeper
// process stays under maxFloodRSS, the raw client's command fails
// transport.output_limit, the others keep runs.max_target_output_bytes of
// output marked as cut, the run's answer is small, the whole output is
// at GET /v1/runs/{id}/outputs, and the database did not grow by the
// flood.
func TestSoulFloodKeepsTheKeeperSmall(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := filepath.Join(dir, ".keeper")
	k := serve(t, dir, "--config", keeperConfig(t, dir, "nats:\n  listen: 127.0.0.1:0\n  heartbeat: 300ms\n"))
	c := adminClient(t, k, data)
	ctx := t.Context()
	m := busReady.FindStringSubmatch(k.Drain())
	if m == nil {
		t.Fatal("the keeper logged no bus URL")
	}
	urls := strings.Fields(m[1])
	ca, err := pki.LoadOrCreateCA(filepath.Join(data, "tls"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Config{DataDir: data}
	identity := func(sid string) bustest.Identity {
		if _, err := c.SoulCreate(ctx, client.SoulCreate{SID: sid, Address: "127.0.0.1", Connection: client.Connection{Port: closedPort(t)}}); err != nil {
			t.Fatal(err)
		}
		id := bustest.Issue(t, ca, sid, time.Hour, time.Now())
		recordSerial(t, cfg, sid, id.Serial)
		return id
	}
	honest := identity("agent.flood.test")
	bustest.StartAgents(t, bustest.AgentSpec{URLs: urls, Identities: []bustest.Identity{honest}, Heartbeat: 300 * time.Millisecond})
	mallory := identity("mallory.flood.test")
	floodAsSoul(t, urls, mallory)
	sshd := sshtest.Start(t, sshtest.Options{})
	addSoul(t, c, "ssh.flood.test", sshd)
	waitLogged(t, k, 20*time.Second, `msg="bus: agent present" component=bus sid=`+honest.SID, `msg="bus: agent present" component=bus sid=`+mallory.SID)

	scenario := fmt.Sprintf(`steps:
  - name: flood
    on: [agent.flood.test, mallory.flood.test, ssh.flood.test]
    module: core.command.ran
    params: {cmd: "head -c %d /dev/zero | tr '\\0' x"}
`, floodBytes)
	run, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: scenario, File: "flood.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	final := waitRun(t, c, run.ID)
	rss := peakRSS(t, k.Cmd.Process.Pid)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("keeper log:\n%s", k.Drain())
		}
	})
	t.Logf("keeper peak RSS %d MiB with three souls sending %d MiB each", rss>>20, floodBytes>>20)
	if rss > maxFloodRSS {
		t.Errorf("the keeper's peak RSS was %d MiB, over the %d MiB bound", rss>>20, maxFloodRSS>>20)
	}
	if len(final.Steps) != 1 || len(final.Steps[0].Targets) != 3 {
		t.Fatalf("run %s: %s", final.Phase, describeSteps(final.Steps))
	}
	for _, tg := range final.Steps[0].Targets {
		switch tg.SID {
		case mallory.SID:
			if tg.Error == nil || tg.Error.Code != "transport.output_limit" {
				t.Errorf("the flooding soul's target: %s %+v, want transport.output_limit", tg.Status, tg.Error)
			}
		default:
			whole, err := c.RunOutputs(ctx, run.ID, "flood", tg.SID)
			if err != nil {
				t.Fatal(err)
			}
			var out struct{ Stdout string }
			if err := json.Unmarshal(whole, &out); err != nil {
				t.Fatalf("%s: the stored output is not the module's: %v", tg.SID, err)
			}
			if tg.Error != nil {
				t.Logf("%s: %+v", tg.SID, tg.Error)
			}
			if tg.Status != "changed" || len(whole) > 1<<20 || !strings.HasPrefix(out.Stdout, "xxxx") || !strings.Contains(out.Stdout, "bytes dropped]") {
				t.Errorf("%s: %s, stored %d bytes of output, stdout ends %q", tg.SID, tg.Status, len(whole), out.Stdout[max(0, len(out.Stdout)-60):])
			}
			if !tg.OutputTruncated || tg.OutputBytes != len(whole) || len(tg.Output) > 64<<10 {
				t.Errorf("%s: the answer holds %d bytes of output (truncated %v, of %d)", tg.SID, len(tg.Output), tg.OutputTruncated, tg.OutputBytes)
			}
		}
	}
	raw, err := json.Marshal(final)
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) > 1<<20 {
		t.Errorf("the run's answer is %d bytes", len(raw))
	}
	var db int64
	for _, f := range []string{"keeper.db", "keeper.db-wal"} {
		if fi, err := os.Stat(filepath.Join(data, f)); err == nil {
			db += fi.Size()
		}
	}
	t.Logf("database and WAL: %d MiB", db>>20)
	if db > 64<<20 {
		t.Errorf("the database and its WAL hold %d MiB after the flood", db>>20)
	}
}

// floodAsSoul connects to the bus as soul id, keeps it present, and
// answers every command with floodBytes of stdout in the largest parts
// an agent sends, ignoring cancels and the max_output asked for.
func floodAsSoul(t *testing.T, urls []string, id bustest.Identity) {
	t.Helper()
	tc, err := id.TLS()
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(strings.Join(urls, ","), nats.Secure(tc), nats.NoReconnect())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go func() {
		hb, _ := json.Marshal(wire.Heartbeat{SID: id.SID})
		tick := time.NewTicker(300 * time.Millisecond)
		defer tick.Stop()
		for {
			nc.Publish(wire.HeartbeatSubject(id.SID), hb)
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	part := []byte(strings.Repeat("x", wire.ChunkSize))
	if _, err := nc.Subscribe(wire.ExecSubject(id.SID), func(m *nats.Msg) {
		var req wire.ExecRequest
		if json.Unmarshal(m.Data, &req) != nil {
			return
		}
		go func() {
			for range floodBytes / wire.ChunkSize {
				r := nats.NewMsg(wire.ReplySubject(id.SID, req.ID))
				r.Header.Set(wire.PartHeader, wire.PartStdout)
				r.Data = part
				if nc.PublishMsg(r) != nil {
					return
				}
			}
			end, _ := json.Marshal(wire.ExecEnd{})
			r := nats.NewMsg(wire.ReplySubject(id.SID, req.ID))
			r.Header.Set(wire.PartHeader, wire.PartEnd)
			r.Data = end
			nc.PublishMsg(r)
		}()
	}); err != nil {
		t.Fatal(err)
	}
	nc.Flush()
}

// waitLogged waits until the keeper has logged a line holding each of
// wants.
func waitLogged(t *testing.T, k *proc, within time.Duration, wants ...string) {
	t.Helper()
	left := map[string]bool{}
	for _, w := range wants {
		left[w] = true
	}
	deadline := time.After(within)
	for len(left) > 0 {
		select {
		case line := <-k.Logs():
			for w := range left {
				if strings.Contains(line, w) {
					delete(left, w)
				}
			}
		case <-deadline:
			t.Fatalf("the keeper did not log %v within %s", left, within)
		}
	}
}

// peakRSS is process pid's peak resident set size (VmHWM), in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc/pid/status")
	return 0
}
