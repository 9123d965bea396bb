package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/soulstack/soulstack/client"
)

// t0 is when the runs of these tests start.
var t0 = time.Date(2026, 11, 30, 6, 28, 0, 0, time.UTC)

// ev builds an event at t0+ms.
func ev(ms int, kind client.EventKind, step, sid, data string) client.RunEvent {
	if data == "" {
		data = "{}"
	}
	return client.RunEvent{At: t0.Add(time.Duration(ms) * time.Millisecond), Kind: kind, Step: step, SID: sid, Data: json.RawMessage(data)}
}

// A run on two web hosts: provision on the keeper, then a package step
// in which web-2 fails, then a step that skips web-2.
var twoHosts = []client.RunEvent{
	ev(0, "run.phase", "", "", `{"phase":"Running","resumed":false}`),
	ev(10, "step.started", "provision", "", `{"module":"core.command.ran","targets":["keeper"]}`),
	ev(310, "target.result", "provision", "keeper", `{"status":"changed","changed":true,"attempts":1,"duration_ms":300}`),
	ev(320, "step.finished", "provision", "", `{"status":"changed"}`),
	ev(330, "step.started", "base", "", `{"module":"core.pkg.installed","targets":["web-1","web-2"]}`),
	ev(400, "log", "base", "web-2", `{"message":"connection refused, retrying (2/3)"}`),
	ev(1500, "target.result", "base", "web-1", `{"status":"ok","changed":false,"attempts":1,"duration_ms":1170}`),
	ev(2330, "target.result", "base", "web-2", `{"status":"unreachable","changed":false,"attempts":3,"duration_ms":2000,"error":{"code":"ssh.unreachable","message":"dial tcp 127.0.0.2:22: connection refused"}}`),
	ev(2340, "step.finished", "base", "", `{"status":"failed"}`),
	ev(2350, "step.started", "motd", "", `{"index":2,"module":"core.file.present","targets":["web-2","web-1"]}`),
	ev(2400, "target.result", "motd", "web-2", `{"status":"skipped","changed":false,"attempts":0,"duration_ms":0,"error":{"code":"target.failed_earlier","message":"web-2 failed in step \"base\""}}`),
	ev(2600, "target.result", "motd", "web-1", `{"status":"changed","changed":true,"attempts":1,"duration_ms":0}`),
	ev(2610, "step.finished", "motd", "", `{"index":2,"status":"changed","changed":true,"counts":{"changed":1,"skipped":1}}`),
	ev(2620, "run.finished", "", "", `{"phase":"Failed","error":{"code":"run.failed","message":"1 target failed"}}`),
}

func TestEventLine(t *testing.T) {
	t.Parallel()
	var got []string
	for _, e := range twoHosts {
		got = append(got, eventLine(e))
	}
	got = append(got,
		eventLine(ev(2700, "stream.lag", "", "", `{"n":1}`)),
		eventLine(ev(2800, "log", "", "", `{"message":"keeper says hi"}`)),
		eventLine(ev(2900, "target.result", "x", "h", `{"error":"plain text error"}`)),
		eventLine(ev(3000, "run.phase", "", "", `{"phase":"Running","resumed":true}`)),
		eventLine(ev(3100, "step.interrupted", "provision", "", `{"index":0,"module":"core.cloud.created"}`)),
	)
	want := `2026-11-30T06:28:00.000Z run.phase     Running
2026-11-30T06:28:00.010Z step.started  provision core.command.ran on keeper
2026-11-30T06:28:00.310Z target.result provision keeper changed 0.3s
2026-11-30T06:28:00.320Z step.finished provision changed
2026-11-30T06:28:00.330Z step.started  base core.pkg.installed on web-1, web-2
2026-11-30T06:28:00.400Z log           base web-2 connection refused, retrying (2/3)
2026-11-30T06:28:01.500Z target.result base web-1 ok 1.2s
2026-11-30T06:28:02.330Z target.result base web-2 unreachable 2.0s after 3 attempts ssh.unreachable: dial tcp 127.0.0.2:22: connection refused
2026-11-30T06:28:02.340Z step.finished base failed
2026-11-30T06:28:02.350Z step.started  motd core.file.present on web-2, web-1
2026-11-30T06:28:02.400Z target.result motd web-2 skipped target.failed_earlier: web-2 failed in step "base"
2026-11-30T06:28:02.600Z target.result motd web-1 changed
2026-11-30T06:28:02.610Z step.finished motd changed
2026-11-30T06:28:02.620Z run.finished  Failed run.failed: 1 target failed
2026-11-30T06:28:02.700Z stream.lag    {"n":1}
2026-11-30T06:28:02.800Z log           keeper says hi
2026-11-30T06:28:02.900Z target.result x h {"error":"plain text error"}
2026-11-30T06:28:03.000Z run.phase     Running (resumed)
2026-11-30T06:28:03.100Z step.interrupted provision core.cloud.created was running when the keeper stopped`
	if g := strings.Join(got, "\n"); g != want {
		t.Errorf("lines:\n%s\nwant:\n%s", g, want)
	}
}

func TestProgressLines(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		events int // how many of twoHosts have arrived
		now    time.Duration
		width  int
		want   string
	}{
		{"nothing yet", 0, 0, 0, "hello run_1  Pending"},
		{"first step running", 2, 200 * time.Millisecond, 0, `
hello run_1  Running  0.2s
  provision  running      0/1  0.2s  keeper=…`},
		{"second step, one host reported", 7, 1600 * time.Millisecond, 0, `
hello run_1  Running  1.6s
  provision  changed      1/1  changed=1  0.3s  keeper=changed
  base       running      1/2  ok=1  1.3s  web-1=ok web-2=…`},
		{"finished", len(twoHosts), time.Hour, 0, `
hello run_1  Failed  2.6s  run.failed: 1 target failed
  provision  changed      1/1  changed=1  0.3s  keeper=changed
  base       failed       2/2  ok=1 unreachable=1  2.0s  web-1=ok web-2=unreachable
    web-2 unreachable: ssh.unreachable: dial tcp 127.0.0.2:22: connection refused
  motd       changed      2/2  changed=1 skipped=1  0.3s  web-2=skipped web-1=changed`},
		{"narrow", 7, 1600 * time.Millisecond, 40, `
hello run_1  Running  1.6s
  provision  changed      1/1  changed=…
  base       running      1/2  ok=1  1.…`},
		{"hosts cut", 7, 1600 * time.Millisecond, 55, `
hello run_1  Running  1.6s
  provision  changed      1/1  changed=1  0.3s  +1
  base       running      1/2  ok=1  1.3s  web-1=ok +1`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := newProgress("run_1", "hello")
			for _, e := range twoHosts[:tt.events] {
				p.apply(e)
			}
			got := strings.Join(p.lines(t0.Add(tt.now), tt.width), "\n")
			if want := strings.TrimPrefix(tt.want, "\n"); got != want {
				t.Errorf("lines:\n%s\nwant:\n%s", got, want)
			}
			for _, l := range p.lines(t0.Add(tt.now), tt.width) {
				if tt.width > 0 && len([]rune(l)) > tt.width {
					t.Errorf("line longer than %d: %q", tt.width, l)
				}
			}
		})
	}
}

// TestProgressManyFailures: the errors under a step are capped so that
// the live view stays on the screen.
func TestProgressManyFailures(t *testing.T) {
	t.Parallel()
	p := newProgress("run_2", "fan")
	p.apply(ev(0, "step.started", "s", "", `{"module":"core.command.ran","targets":["h1","h2","h3","h4","h5"]}`))
	for i := 1; i <= 5; i++ {
		p.apply(ev(100*i, "target.result", "s", "h"+string(rune('0'+i)), `{"status":"failed","error":{"code":"command.failed","message":"exit 1"}}`))
	}
	got := strings.Join(p.lines(t0.Add(time.Second), 0), "\n")
	want := `fan run_2  Pending  1.0s
  s  running      5/5  failed=5  1.0s  h1=failed h2=failed h3=failed h4=failed h5=failed
    h1 failed: command.failed: exit 1
    h2 failed: command.failed: exit 1
    h3 failed: command.failed: exit 1
    … and 2 more`
	if got != want {
		t.Errorf("lines:\n%s\nwant:\n%s", got, want)
	}
}

func TestRecap(t *testing.T) {
	t.Parallel()
	start, end := t0.Add(time.Second), t0.Add(64*time.Second)
	tests := []struct {
		name string
		run  client.Run
		want string
	}{
		{"succeeded with outputs", client.Run{
			ID: "run_1", Name: "hello", Phase: "Succeeded", CreatedAt: t0, StartedAt: &start, FinishedAt: &end,
			Steps: []client.RunStep{
				{Name: "provision", Status: "changed", Targets: []client.RunTarget{{SID: "keeper", Status: "changed"}}},
				{Name: "base", Status: "ok", Targets: []client.RunTarget{{SID: "web-10.example.com", Status: "ok"}, {SID: "web-1", Status: "changed"}}},
				{Name: "motd", Status: "ok", Targets: []client.RunTarget{{SID: "web-10.example.com", Status: "skipped"}, {SID: "web-1", Status: "ok"}}},
			},
			Outputs: json.RawMessage(`{"base":{"web-1":{"installed":["git"]}},"provision":{"rc":0}}`),
			Message: `{"base":{"web-1":{"installed":["git"]}},"provision":{"rc":0}}`,
		}, `RECAP hello run_1  Succeeded in 1m03s
keeper             : ok=0    changed=1    failed=0    skipped=0    unreachable=0
web-1              : ok=1    changed=1    failed=0    skipped=0    unreachable=0
web-10.example.com : ok=1    changed=0    failed=0    skipped=1    unreachable=0

Outputs:
{
  "base": {
    "web-1": {
      "installed": [
        "git"
      ]
    }
  },
  "provision": {
    "rc": 0
  }
}
`},
		{"failed before any step", client.Run{
			ID: "run_2", Name: "hello", Phase: "Failed", CreatedAt: t0, FinishedAt: &start,
			Error: &client.RunError{Code: "run.interrupted", Message: "the keeper stopped during step provision"}, Message: "{}",
		}, `RECAP hello run_2  Failed in 1.0s
error: run.interrupted: the keeper stopped during step provision
`},
		{"failed with outputs", client.Run{
			ID: "run_4", Name: "hello", Phase: "Failed", CreatedAt: t0, StartedAt: &start, FinishedAt: &end,
			Steps: []client.RunStep{
				{Name: "a", Status: "changed", Targets: []client.RunTarget{{SID: "h", Status: "changed"}}},
				{Name: "b", Status: "failed", Targets: []client.RunTarget{{SID: "h", Status: "failed", Error: &client.RunError{Code: "command.failed", Message: "exit status 1: (no output)"}}}},
			},
			Error:   &client.RunError{Code: "run.targets_failed", Message: "1 target(s) failed: b on h: command.failed: exit status 1: (no output)"},
			Outputs: json.RawMessage(`{"a":{"h":{"rc":0}}}`),
			Message: "b on h: command.failed: exit status 1: (no output)",
		}, `RECAP hello run_4  Failed in 1m03s
error: run.targets_failed: 1 target(s) failed: b on h: command.failed: exit status 1: (no output)
h : ok=0    changed=1    failed=1    skipped=0    unreachable=0

Outputs:
{
  "a": {
    "h": {
      "rc": 0
    }
  }
}
`},
		{"unfinished", client.Run{ID: "run_3", Phase: "Running", CreatedAt: t0, StartedAt: &start, Steps: []client.RunStep{
			{Name: "a", Targets: []client.RunTarget{{SID: "h", Status: "unreachable"}, {SID: "h", Status: "failed"}}},
		}}, `RECAP run run_3  Running
h : ok=0    changed=0    failed=1    skipped=0    unreachable=1
`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := recap(&tt.run); got != tt.want {
				t.Errorf("recap:\n%s\nwant:\n%s", got, tt.want)
			}
		})
	}
}

func TestShortDuration(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		-time.Second:                          "0.0s",
		0:                                     "0.0s",
		420 * time.Millisecond:                "0.4s",
		9949 * time.Millisecond:               "9.9s",
		12*time.Second + 400*time.Millisecond: "12s",
		3*time.Minute + 5*time.Second:         "3m05s",
		2*time.Hour + 10*time.Minute:          "2h10m",
	} {
		if got := shortDuration(d); got != want {
			t.Errorf("shortDuration(%s) = %q, want %q", d, got, want)
		}
	}
}

func TestInputValue(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want string // JSON of the value
	}{
		{`["git","curl"]`, `["git","curl"]`},
		{`3`, `3`},
		{`true`, `true`},
		{`{"a":1}`, `{"a":1}`},
		{`"1.10"`, `"1.10"`},
		{`null`, `null`},
		{`web`, `"web"`},
		{``, `""`},
		{`1 2`, `"1 2"`},
		{`[1,`, `"[1,"`},
		{`12345678901234567890`, `12345678901234567890`},
	}
	for _, tt := range tests {
		b, err := json.Marshal(inputValue(tt.in))
		if err != nil || string(b) != tt.want {
			t.Errorf("inputValue(%q) = %s (%v), want %s", tt.in, b, err, tt.want)
		}
	}
}

// TestLiveView: the block is redrawn over itself, log lines stay above it,
// and nothing is wider than the terminal.
func TestLiveView(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	v := newLiveView(&terminal{w: &out, size: func() (int, int) { return 80, 24 }}, newProgress("run_1", "hello"))
	now := t0
	v.now = func() time.Time { return now }
	v.mu.Lock()
	v.draw()
	v.mu.Unlock()
	for _, e := range twoHosts[:6] { // up to the log line
		now = e.At
		v.event(e)
	}
	got := out.String()
	want := "hello run_1  Pending\n" +
		// run.phase and step.started come within redrawAfter of the
		// first draw: no redraw until target.result at 310ms
		"\x1b[1A\r\x1b[Jhello run_1  Running  0.3s\n  provision  running      1/1  changed=1  0.3s  keeper=changed\n" +
		// step.finished at 320ms and step.started at 330ms: too soon
		// the log line at 400ms goes above the block, which is redrawn
		"\x1b[2A\r\x1b[J2026-11-30T06:28:00.400Z log           base web-2 connection refused, retrying…\n" +
		"hello run_1  Running  0.4s\n" +
		"  provision  changed      1/1  changed=1  0.3s  keeper=changed\n" +
		"  base       running      0/2  0.1s  web-1=… web-2=…\n"
	if got != want {
		t.Errorf("terminal got:\n%q\nwant:\n%q", got, want)
	}
}

// TestLiveViewHeight: a block taller than the terminal keeps the header
// and the latest lines.
func TestLiveViewHeight(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	p := newProgress("run_1", "tall")
	for i := range 10 {
		p.apply(ev(i, "step.started", "s"+string(rune('0'+i)), "", `{}`))
	}
	v := newLiveView(&terminal{w: &out, size: func() (int, int) { return 80, 6 }}, p)
	v.now = func() time.Time { return t0.Add(time.Second) }
	v.draw()
	want := `tall run_1  Pending  1.0s
  … 7 more line(s) above
  s7  running      0/0  1.0s
  s8  running      0/0  1.0s
  s9  running      0/0  1.0s
`
	if got := out.String(); got != want {
		t.Errorf("terminal got:\n%s\nwant:\n%s", got, want)
	}
	if v.shown != 5 {
		t.Errorf("shown = %d, want 5 (one line short of the height)", v.shown)
	}
}

func TestRunInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "in.json")
	if err := os.WriteFile(file, []byte(`{"packages":["git"],"count":1,"name":"from-file"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		pairs   []string
		file    string
		stdin   string
		want    string
		wantErr string
	}{
		{"none", nil, "", "", "null", ""},
		{"pairs", []string{`packages=["git","curl"]`, "count=3", "name=web", "flag=true"}, "", "", `{"count":3,"flag":true,"name":"web","packages":["git","curl"]}`, ""},
		{"file", nil, file, "", `{"count":1,"name":"from-file","packages":["git"]}`, ""},
		{"flags win", []string{"count=2"}, file, "", `{"count":2,"name":"from-file","packages":["git"]}`, ""},
		{"stdin", []string{"b=2"}, "-", `{"a":1}`, `{"a":1,"b":2}`, ""},
		{"value with =", []string{"expr=a=b"}, "", "", `{"expr":"a=b"}`, ""},
		{"no value", []string{"flag"}, "", "", "", `--input: want key=value, got "flag"`},
		{"twice", []string{"a=1", "a=2"}, "", "", "", `--input: key "a" given twice`},
		{"file not an object", nil, "-", `[1]`, "", "--input-file: want a JSON object"},
		{"missing file", nil, filepath.Join(dir, "nope.json"), "", "", "--input-file: open "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := runInput(tt.pairs, tt.file, strings.NewReader(tt.stdin))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if b, _ := json.Marshal(got); string(b) != tt.want {
				t.Errorf("input = %s, want %s", b, tt.want)
			}
		})
	}
}
