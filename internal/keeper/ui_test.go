package keeper_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/fetch"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"golang.org/x/crypto/ssh"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/sshtest"
)

// chromium returns Debian's chromium, which scripts/test installs; a
// machine without it fails the browser tests rather than skipping them.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("SOULSTACK_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"/usr/bin/chromium", "chromium"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("chromium not found: run scripts/test, which installs it (or apt-get install chromium), or set SOULSTACK_CHROMIUM")
	return ""
}

// browser is one headless Chromium this test started, with a fresh
// profile, recording the body of every API answer it receives.
type browser struct {
	t    *testing.T
	ctx  context.Context
	base string // the keeper's URL
	shot string // screenshot directory

	loads int // makes every open a full page load

	mu        sync.Mutex
	responses map[network.RequestID]string // API answers of this page load: request id -> URL
	pending   map[network.RequestID]string // requests sent and not yet loaded or failed: id -> URL
	seen      map[string][]string          // bodies of API answers collected so far, by URL
	problems  []string                     // script exceptions, console errors, policy violations
}

func newBrowser(t *testing.T, base, shots string) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelCtx(); cancelAlloc() }) // stops the browser this test started
	b := &browser{t: t, ctx: ctx, base: base, shot: shots, responses: map[network.RequestID]string{}, pending: map[network.RequestID]string{}, seen: map[string][]string{}}
	if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{MaxTotalBufferSize: ptr(int64(64 << 20)), MaxResourceBufferSize: ptr(int64(8 << 20))}); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	if _, err := chromedp.Call(ctx, cdplog.Enable, cdp.Empty{}); err != nil {
		t.Fatal(err)
	}
	err := chromedp.Listen(ctx, func(ev any) {
		b.mu.Lock()
		defer b.mu.Unlock()
		switch e := ev.(type) {
		case *network.EventRequestWillBeSent:
			b.pending[e.RequestID] = e.Request.Method + " " + e.Request.URL
		case *network.EventLoadingFinished:
			delete(b.pending, e.RequestID)
		case *network.EventLoadingFailed:
			delete(b.pending, e.RequestID)
		case *network.EventResponseReceived:
			if strings.Contains(e.Response.URL, "/v1/") {
				b.responses[e.RequestID] = e.Response.URL
			}
		case *runtime.EventExceptionThrown:
			d := e.ExceptionDetails
			text := d.Text
			if d.Exception != nil {
				text += " " + d.Exception.Description
			}
			b.problems = append(b.problems, fmt.Sprintf("exception at %s:%d: %s", d.URL, d.LineNumber+1, text))
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.ConsoleAPICalledTypeError {
				b.problems = append(b.problems, "console.error")
			}
		case *cdplog.EventEntryAdded:
			// Refused API requests are logged as failed loads; the rest
			// (a policy violation, a script error) is a defect.
			if e.Entry.Level == cdplog.EntryLevelError && e.Entry.Source != cdplog.EntrySourceNetwork {
				b.problems = append(b.problems, fmt.Sprintf("%s: %s (%s)", e.Entry.Source, e.Entry.Text, e.Entry.URL))
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func ptr[T any](v T) *T { return &v }

// run runs actions with a time limit, failing the test with the page's
// main element when one fails.
func (b *browser) run(actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 90*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("browser: %v\npage: %s", err, b.mainHTML())
	}
}

func (b *browser) mainHTML() string {
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	html, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('main') ? document.querySelector('main').outerHTML : ''`))
	return html
}

// open loads a UI route (#/…) afresh and waits for the CSS selector sel.
// A load that shows nothing of the route within 30 s (seen, rarely, on a
// loaded machine: the page left at "Loading…" or at the sign-in form
// with the session's key in place) is loaded once more, and the test log
// says so; a second load that fails fails the test.
func (b *browser) open(route, sel string) {
	b.t.Helper()
	b.loads++
	b.collect()
	url := fmt.Sprintf("%s/ui/?load=%d%s", b.base, b.loads, route)
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	err := chromedp.Do(ctx, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS(sel)))
	cancel()
	if err == nil {
		return
	}
	b.mu.Lock()
	pending := slices.Sorted(maps.Values(b.pending))
	b.mu.Unlock()
	b.t.Logf("open %s: %v after 30 s; loading it again (page: %.300s; requests without an answer: %q)", route, err, b.mainHTML(), pending)
	b.loads++
	b.run(chromedp.Navigate(fmt.Sprintf("%s/ui/?load=%d%s", b.base, b.loads, route)), chromedp.WaitVisible(chromedp.CSS(sel)))
}

// held is the interception of the page's requests for one URL (the
// browser's Fetch domain pauses them): every one is held until release,
// which lets go all but the first (never answered) and those that follow.
type held struct {
	b      *browser
	cancel context.CancelFunc
	mu     sync.Mutex
	ids    []fetch.RequestID
	open   bool // released: requests go on as they come
}

// hold holds the page's requests whose URL contains part.
func (b *browser) hold(part string) *held {
	b.t.Helper()
	ctx, cancel := context.WithCancel(b.ctx)
	h := &held{b: b, cancel: cancel}
	err := chromedp.Listen(ctx, func(ev any) {
		if e, ok := ev.(*fetch.EventRequestPaused); ok {
			h.mu.Lock()
			h.ids = append(h.ids, e.RequestID)
			goOn := h.open && len(h.ids) > 1
			h.mu.Unlock()
			if goOn {
				go h.goOn(e.RequestID)
			}
		}
	})
	if err != nil {
		b.t.Fatal(err)
	}
	if _, err := chromedp.Call(b.ctx, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{{URLPattern: "*" + part + "*"}}}); err != nil {
		b.t.Fatal(err)
	}
	return h
}

func (h *held) goOn(id fetch.RequestID) {
	_, _ = chromedp.Call(h.b.ctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: id})
}

// release lets every request held but the first go on, and those that
// come later.
func (h *held) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.open = true
	for i, id := range h.ids {
		if i > 0 {
			go h.goOn(id)
		}
	}
}

// end stops the interception and returns how many requests it saw.
func (h *held) end() int {
	h.b.t.Helper()
	if _, err := chromedp.Call(h.b.ctx, fetch.Disable, cdp.Empty{}); err != nil {
		h.b.t.Fatal(err)
	}
	h.cancel()
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.ids)
}

// wait waits until the CSS selector sel matches a visible element.
func (b *browser) wait(sel ...string) {
	b.t.Helper()
	for _, s := range sel {
		b.run(chromedp.WaitVisible(chromedp.CSS(s)))
	}
}

// screenshot saves the whole page as name.png in the screenshot directory.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	png := get(b, chromedp.FullScreenshot(100))
	if err := os.WriteFile(filepath.Join(b.shot, name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// get runs one action that returns a value.
func get[T any](b *browser, a chromedp.Action[T]) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 90*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		b.t.Fatalf("browser: %v\npage: %s", err, b.mainHTML())
	}
	return v
}

// eval runs a script in the page (a promise is awaited) and returns its
// value decoded as T.
func eval[T any](b *browser, script string) T {
	b.t.Helper()
	return get(b, chromedp.Evaluate[T](script, chromedp.EvalAwaitPromise))
}

// html is the whole document as the browser has it now.
func (b *browser) html() string {
	b.t.Helper()
	return eval[string](b, `document.documentElement.outerHTML`)
}

// collect reads the bodies of the API answers of the page shown, before
// a navigation makes the browser let them go.
func (b *browser) collect() {
	b.mu.Lock()
	ids := b.responses
	b.responses = map[network.RequestID]string{}
	b.mu.Unlock()
	for id, u := range ids {
		res, err := chromedp.Call(b.ctx, network.GetResponseBody, network.GetResponseBodyParams{RequestID: id})
		if err != nil {
			continue // a stream still open
		}
		b.seen[u] = append(b.seen[u], string(res.Body)) // decoded from base64 when it was sent so
	}
}

// bodies returns every API answer the browser received, by URL.
func (b *browser) bodies() map[string][]string {
	b.collect()
	return b.seen
}

func (b *browser) signIn(token string) {
	b.t.Helper()
	b.open("", "#token")
	b.run(chromedp.SendKeys(chromedp.CSS("#token"), token), chromedp.Click(chromedp.CSS("#signin button[type=submit]")),
		chromedp.WaitVisible(chromedp.CSS("#nav")))
	// The first page after the sign-in has loaded with the session: its
	// key, kept in sessionStorage, has reached the browser, so the next
	// navigation finds it. (A navigation at once after the sign-in can
	// start its document before Chromium has the key: it showed the
	// sign-in form with no key, 2 runs in 10 here.)
	get(b, chromedp.Poll[bool](`!!document.querySelector('#nav a[aria-current="page"]') && !document.getElementById('main').textContent.includes('Loading…')`))
}

func (b *browser) signOut() {
	b.t.Helper()
	b.run(chromedp.Click(chromedp.CSS("#sign-out")), chromedp.WaitVisible(chromedp.CSS("#token")))
}

// fetchResult is what a request sent from the page got.
type fetchResult struct {
	Status int    `json:"status"`
	Code   string `json:"code"`
}

// pageFetch sends a request from the page itself, with its session
// cookie, the way a forged click or a script injected into the page would;
// withKey adds the session's key, which only the page's own origin holds.
func (b *browser) pageFetch(method, path, body string, withKey bool) fetchResult {
	b.t.Helper()
	return eval[fetchResult](b, fmt.Sprintf(`(async () => {
		const headers = {'Content-Type': 'application/json'};
		if (%t) headers['X-CSRF-Token'] = sessionStorage.getItem('soulstack.session_key');
		const res = await fetch(%q, {method: %q, headers, body: %q || undefined});
		let code = '';
		try { code = (await res.json()).code || ''; } catch (e) {}
		return {status: res.status, code};
	})()`, withKey, path, method, body))
}

// noSideScroll fails when the page is wider than the window.
func (b *browser) noSideScroll(what string) {
	b.t.Helper()
	wide := eval[struct {
		Scroll int `json:"scroll"`
		Inner  int `json:"inner"`
	}](b, `({scroll: document.documentElement.scrollWidth, inner: window.innerWidth})`)
	if wide.Scroll > wide.Inner {
		b.t.Errorf("%s scrolls sideways at %d px: the page is %d px wide", what, wide.Inner, wide.Scroll)
	}
}

const uiCanary = "canary-ui-5ecr3t-9f27"

// gatedScenario waits on its soul until the gate file exists, so the test
// can watch the run in the UI while it is running.
func gatedScenario(gate string) string {
	return `name: ui-gated
inputs:
  db_password: {type: string, secret: true}
steps:
  - name: wait
    on: web-1.local.test
    module: core.command.ran
    params:
      cmd: 'while [ ! -e ` + gate + ` ]; do sleep 0.1; done; echo "pw=$PW"'
      env: {PW: "${ input.db_password }"}
    changed_when: "false"
  - name: after
    on: web-1.local.test
    module: core.command.ran
    params: {cmd: "echo done"}
    changed_when: "false"
`
}

// checkEventDecoding runs the UI's event module (js/events.js, the one
// place that knows the stream's shapes) in the page over an SSE text with
// every kind of event of the run vocabulary (docs/run-events.md).
func checkEventDecoding(t *testing.T, b *browser) {
	t.Helper()
	stream := strings.Join([]string{
		`id: 1` + "\n" + `event: run.phase` + "\n" + `data: {"seq":1,"at":"2026-01-02T03:04:05Z","kind":"run.phase","data":{"phase":"Running","resumed":true}}`,
		`: keepalive`,
		`id: 2` + "\n" + `event: step.started` + "\n" + `data: {"seq":2,"kind":"step.started","step":"base","data":{"index":0,"module":"core.pkg.installed","targets":["a","b"]}}`,
		`id: 3` + "\n" + `data: {"seq":3,"kind":"step.started","step":"next","data":{"index":1,"module":"core.command.ran","targets":["keeper"]}}`,
		`id: 4` + "\n" + `data: {"seq":4,"kind":"target.result","step":"base","sid":"a","data":{"status":"changed","changed":true,"attempts":2,"duration_ms":1500}}`,
		`id: 5` + "\n" + `data: {"seq":5,"kind":"target.result","step":"base","sid":"b","data":{"status":"unreachable","attempts":1,"duration_ms":3,"error":{"code":"ssh.unreachable","message":"no route to host"}}}`,
		`id: 6` + "\n" + `data: {"seq":6,"kind":"target.result","step":"base","sid":"c","data":{"status":"ok","changed":false}}`,
		`id: 7` + "\n" + `data: {"seq":7,"kind":"step.finished","step":"base","data":{"index":0,"status":"failed","changed":true,"counts":{"changed":1,"ok":1,"unreachable":1}}}`,
		`id: 8` + "\n" + `data: {"seq":8,"kind":"log","step":"base","sid":"a","data":{"message":"hello"}}`,
		`id: 9` + "\n" + `data: {"seq":9,"kind":"step.interrupted","step":"next","data":{"index":1,"module":"core.command.ran"}}`,
		`id: 10` + "\n" + `data: {"seq":10,"kind":"run.finished","data":{"phase":"Failed","error":{"code":"run.failed","message":"m"}}}`,
		`id: 11` + "\n" + `data: {"seq":11,"kind":"something.new","data":{"x":1}}`,
		`event: stream.denied` + "\n" + `data: {"seq":11,"kind":"stream.denied","data":{"code":"auth.forbidden","status":403}}`,
		`event: stream.end` + "\n" + `data: {"kind":"stream.end","seq":11}`,
		`id: 12` + "\n" + `data: {"seq":12,"kind":"log","da`,
	}, "\n\n")
	got := eval[struct {
		Rest    string           `json:"rest"`
		Updates []map[string]any `json:"updates"`
	}](b, fmt.Sprintf(`(async () => {
		const ev = await import('/ui/js/events.js');
		const {events, rest} = ev.parse(%q);
		return {rest, updates: events.map(ev.decode).map(u => ({...u, at: u.at ? u.at.toISOString() : null}))};
	})()`, stream))
	want := []string{
		`{"type":"phase","seq":1,"phase":"Running","resumed":true,"at":"2026-01-02T03:04:05.000Z"}`,
		`{"type":"step-started","seq":2,"step":"base","module":"core.pkg.installed","targets":["a","b"]}`,
		`{"type":"step-started","seq":3,"step":"next","module":"core.command.ran","targets":["keeper"]}`,
		`{"type":"target","seq":4,"sid":"a","status":"changed","changed":true,"attempts":2,"durationMs":1500,"error":null}`,
		`{"type":"target","seq":5,"sid":"b","status":"unreachable","error":{"code":"ssh.unreachable","message":"no route to host"}}`,
		`{"type":"target","seq":6,"sid":"c","status":"ok","changed":false}`,
		`{"type":"step-finished","seq":7,"status":"failed","changed":true,"counts":{"changed":1,"ok":1,"unreachable":1}}`,
		`{"type":"log","seq":8,"sid":"a","text":"hello"}`,
		`{"type":"log","seq":9,"step":"next","text":"core.command.ran was running when the keeper stopped"}`,
		`{"type":"finished","seq":10,"phase":"Failed","error":{"code":"run.failed","message":"m"}}`,
		`{"type":"other","seq":11,"kind":"something.new"}`,
		`{"type":"denied","problem":{"code":"auth.forbidden","status":403}}`,
		`{"type":"end","seq":11}`,
	}
	if len(got.Updates) != len(want) || !strings.HasPrefix(got.Rest, "id: 12") {
		t.Fatalf("events.js parsed %d events (rest %q), want %d:\n%v", len(got.Updates), got.Rest, len(want), got.Updates)
	}
	for i, w := range want {
		var fields map[string]any
		if err := json.Unmarshal([]byte(w), &fields); err != nil {
			t.Fatal(err)
		}
		for k, v := range fields {
			gv, _ := json.Marshal(got.Updates[i][k])
			wv, _ := json.Marshal(v)
			if string(gv) != string(wv) {
				t.Errorf("event %d: %s = %s, want %s (decoded %v)", i+1, k, gv, wv, got.Updates[i])
			}
		}
	}
}

// TestWebUI drives the web UI in a real headless Chromium against a real
// keeper and a real sshd: sign-in, a run watched live until it is green,
// every page at laptop and phone width, RBAC and CSRF refusals, and the
// secrets that must never reach the browser.
func TestWebUI(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := filepath.Join(dir, ".keeper")
	k := serve(t, dir)
	c := adminClient(t, k, data)
	raw, _ := os.ReadFile(filepath.Join(data, "admin.token"))
	admin := strings.TrimSpace(string(raw))
	ctx := context.Background()

	shots := os.Getenv("SOULSTACK_UI_SHOTS")
	if shots == "" {
		shots = filepath.Join(os.TempDir(), "soulstack-ui-shots")
	}
	if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots in %s", shots)

	srv := sshtest.Start(t, sshtest.Options{})
	addSoul(t, c, "web-1.local.test", srv)
	if _, err := c.ProviderCreate(ctx, client.ProviderCreate{Name: "lab", Driver: "local", CredentialsRef: "env:LAB_CREDENTIALS",
		FQDNSuffix: "local.test", Config: map[string]any{"password": uiCanary}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ProfileCreate(ctx, client.ProfileCreate{Name: "small", Provider: "lab", Spec: map[string]any{"image": "debian-12", "memory_mb": 512}}); err != nil {
		t.Fatal(err)
	}
	viewer, err := c.TokenCreate(ctx, client.TokenCreate{Name: "viewer", Role: "viewer"})
	if err != nil {
		t.Fatal(err)
	}

	b := newBrowser(t, k.Addr, shots)
	b.open("", "#token")
	b.screenshot("signin")
	checkEventDecoding(t, b)
	b.signIn(admin)
	cookie := eval[string](b, `document.cookie`)
	if strings.Contains(cookie, "sst_") || strings.Contains(cookie, "soulstack_session") {
		t.Fatalf("page script reads the session token: document.cookie = %q", cookie)
	}
	if strings.Contains(b.html(), admin) {
		t.Fatal("the signed-in page still holds the token in its DOM")
	}

	// A run started from soulctl, outside the browser, watched live:
	// running, then green.
	gate := filepath.Join(t.TempDir(), "gate")
	scenarioFile := filepath.Join(t.TempDir(), "ui-gated.yaml")
	if err := os.WriteFile(scenarioFile, []byte(gatedScenario(gate)), 0o644); err != nil {
		t.Fatal(err)
	}
	start := exec.Command(soulctlBinary(t), "--keeper", k.Addr, "run", scenarioFile, "--input", "db_password="+uiCanary, "--key", "ui", "--detach")
	start.Env = append(os.Environ(), "SOULSTACK_TOKEN="+admin)
	out, err := start.CombinedOutput()
	if err != nil {
		t.Fatalf("soulctl run --detach: %v\n%s", err, out)
	}
	run := client.Run{ID: strings.TrimSpace(string(out))}
	b.open("#/runs/"+run.ID, "#grid")
	b.wait(`tr[data-step="wait"] td[data-sid="web-1.local.test"][data-status="running"]`, `#cancel`)
	b.screenshot("run-live")
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	b.wait(`#run-phase[data-phase="Succeeded"]`,
		`tr[data-step="wait"] td[data-sid="web-1.local.test"][data-status="ok"]`,
		`tr[data-step="after"] td[data-sid="web-1.local.test"][data-status="ok"]`,
		`pre.outputs`)
	if eval[int](b, `document.querySelectorAll('#cancel').length`) != 0 {
		t.Fatal("a finished run still offers Cancel")
	}
	outputs := eval[string](b, `(document.querySelector('pre.outputs') || {}).textContent || ''`) // one evaluation: the page may redraw
	if !strings.Contains(outputs, "pw=***") {
		t.Fatalf("the run's outputs lost their masked value: %s", outputs)
	}
	b.screenshot("run-done")

	// A failed run: the failed target in red with its error, the message.
	failed, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: `name: ui-failing
steps:
  - name: broken
    on: web-1.local.test
    module: core.command.ran
    params: {cmd: "echo no disk >&2; exit 3"}
`})
	if err != nil {
		t.Fatal(err)
	}
	b.open("#/runs/"+failed.ID, `#run-phase[data-phase="Failed"]`)
	b.wait(`tr[data-step="broken"] td[data-sid="web-1.local.test"][data-status="failed"] .cell-error`)
	// The run page re-renders as events arrive: read the cell's text once
	// it holds one, not the node the wait found (it may have been replaced).
	get(b, chromedp.Poll[bool](`!!(document.querySelector('tr[data-step="broken"] .cell-error') || {}).textContent`))
	if msg := eval[string](b, `(document.querySelector('tr[data-step="broken"] .cell-error') || {}).textContent || ''`); !strings.Contains(msg, "command.failed") && !strings.Contains(msg, "exit") {
		t.Fatalf("failed target shows %q", msg)
	}
	b.screenshot("run-failed")

	// A GET the keeper never answers (held in the browser: the first
	// request for the run) is asked again: the page says what it waits
	// for, then shows the run.
	held := b.hold("/v1/runs/" + failed.ID)
	b.loads++
	b.run(chromedp.Navigate(fmt.Sprintf("%s/ui/?load=%d#/runs/%s", b.base, b.loads, failed.ID)))
	get(b, chromedp.Poll[bool](`((document.getElementById('loading') || {}).textContent || '').includes('GET /v1/runs/`+failed.ID+`: no answer within 10 s; asking the keeper again (attempt 2 of 3)')`))
	held.release()
	b.wait(`#run-phase[data-phase="Failed"]`)
	if n := held.end(); n < 2 {
		t.Fatalf("the page asked for the run %d times, want a second request after the first went unanswered", n)
	}

	// A check run: its mode, the plan with the file's diff, nothing made.
	planned := filepath.Join(t.TempDir(), "planned.conf")
	checkRun, _, err := c.RunCreate(ctx, client.RunCreate{Mode: client.RunCheck, Scenario: `name: ui-check
steps:
  - name: conf
    on: web-1.local.test
    module: core.file.present
    params: {path: "` + planned + `", content: "listen 8080\n"}
`})
	if err != nil {
		t.Fatal(err)
	}
	b.open("#/runs/"+checkRun.ID, `#run-mode[data-mode="check"]`)
	b.wait(`#plan li[data-step="conf"][data-status="would_change"] pre.diff`, `tr[data-step="conf"] td[data-status="would_change"]`)
	get(b, chromedp.Poll[bool](`!!(document.querySelector('#plan pre.diff') || {}).textContent`))
	// The page re-renders as the run's last events arrive: read the text
	// in one evaluation, not through a node a redraw may have replaced.
	if diff := eval[string](b, `(document.querySelector('#plan pre.diff') || {}).textContent || ''`); !strings.Contains(diff, "+listen 8080") {
		t.Fatalf("the plan's diff shows %q", diff)
	}
	if _, err := os.Stat(planned); !os.IsNotExist(err) {
		t.Fatalf("the check run wrote %s: %v", planned, err)
	}
	b.screenshot("run-check")

	// The drift page: a seed never applied is drifted (pending), and its
	// check run, one click away, has the plan.
	seeded := filepath.Join(t.TempDir(), "seeded.conf")
	if _, err := c.SeedAdd(ctx, "web-1.local.test", client.SeedCreate{Scenario: `inputs:
  sid: {type: string}
steps:
  - name: conf
    on: "${ input.sid }"
    module: core.file.present
    params: {path: "` + seeded + `", content: "seeded\n"}
`}); err != nil {
		t.Fatal(err)
	}
	started, err := c.DriftChecks(ctx, client.DriftCheck{SIDs: []string{"web-1.local.test"}})
	if err != nil || len(started.Checks) != 1 {
		t.Fatalf("drift check: %+v, %v", started, err)
	}
	waitRun(t, c, started.Checks[0].RunID)
	b.open("#/drift", `#drift tr[data-sid="web-1.local.test"][data-state="drifted"]`)
	b.wait(`#drift-summary [data-state="drifted"]`, `#drift-check-all`)
	b.run(chromedp.Click(chromedp.CSS(`#drift tr[data-sid="web-1.local.test"] a[href^="#/runs/"]`)))
	b.wait(`#run-mode[data-mode="check"]`, `#plan li[data-step="conf"][data-status="would_change"]`)
	b.screenshot("drift")

	// Cancel from the UI: a second run, held at its gate until cancelled.
	gate2 := filepath.Join(t.TempDir(), "gate")
	defer os.WriteFile(gate2, nil, 0o644) // releases the host's loop whatever happens
	run2, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: gatedScenario(gate2), Input: map[string]any{"db_password": uiCanary}, Key: "ui-cancel"})
	if err != nil {
		t.Fatal(err)
	}
	b.open("#/runs/"+run2.ID, `tr[data-step="wait"] td[data-status="running"]`)
	b.run(chromedp.Click(chromedp.CSS("#cancel")))
	b.wait(`#run-phase[data-phase="Cancelled"]`)
	if r, err := c.RunGet(ctx, run2.ID); err != nil || r.Phase != "Cancelled" {
		t.Fatalf("run cancelled from the UI is %v (%v)", r, err)
	}

	// Every page, at laptop width.
	pages := []struct{ route, sel, name string }{
		{"#/runs", `#runs tr[data-run="` + run.ID + `"]`, "runs"},
		{"#/runs?phase=Failed", `#runs tr[data-run="` + failed.ID + `"]`, "runs-filtered"},
		{"#/souls", `#souls [data-host-key]`, "souls"},
		{"#/providers", `#providers tr[data-key="lab"]`, "providers"},
		{"#/profiles", `#profiles tr[data-key="small"]`, "profiles"},
		{"#/tokens", `#tokens tr[data-key="` + viewer.ID + `"]`, "tokens"},
		{"#/audit", `#audit-verify[data-ok="true"]`, "audit"},
		{"#/modules", `#modules a[href="#/modules/core.command.ran"]`, "modules"},
		{"#/modules/core.command.ran", `h1.mono`, "module"},
	}
	for _, p := range pages {
		b.open(p.route, p.sel)
		b.screenshot(p.name)
	}
	b.open("#/souls", `#souls [data-host-key]`)
	get(b, chromedp.Poll[bool](`document.querySelector('[data-host-key]').textContent.includes('SHA256:')`))
	fp := get(b, chromedp.Text(chromedp.CSS(`[data-host-key]`)))
	if !strings.Contains(fp, "SHA256:") {
		t.Fatalf("souls page shows no host key fingerprint: %q", fp)
	}
	soul, err := c.SoulGet(ctx, "web-1.local.test")
	if err != nil {
		t.Fatal(err)
	}
	hostKey, _, _, _, err := ssh.ParseAuthorizedKey([]byte(soul.Connection.HostKey))
	if err != nil {
		t.Fatalf("pinned host key %q: %v", soul.Connection.HostKey, err)
	}
	if want := ssh.FingerprintSHA256(hostKey); !strings.Contains(fp, want) {
		t.Fatalf("souls page shows %q, want the pinned key's fingerprint %s", fp, want)
	}

	// Profiles: created and deleted through the page; bad input is
	// reported with its code and creates nothing.
	b.open("#/profiles", "#profile-create")
	b.run(chromedp.WaitReady(chromedp.CSS(`#pr-provider option[value="lab"]`)))
	b.run(chromedp.SendKeys(chromedp.CSS("#pr-name"), "Bad_Name"), chromedp.SendKeys(chromedp.CSS("#pr-spec"), `{"image": "debian-12"}`),
		chromedp.Click(chromedp.CSS("#profile-create button[type=submit]")))
	b.wait(`#profile-create .error`)
	if code := get(b, chromedp.Text(chromedp.CSS(`#profile-create .error strong`))); code != "name.invalid" {
		t.Fatalf("bad profile name reported as %q, want name.invalid", code)
	}
	eval[string](b, `document.querySelector('#pr-name').value = ''`)
	b.run(chromedp.SendKeys(chromedp.CSS("#pr-name"), "medium"),
		chromedp.Click(chromedp.CSS("#profile-create button[type=submit]")))
	b.wait(`#profiles tr[data-key="medium"]`)
	if p, err := c.ProfileGet(ctx, "medium"); err != nil || !strings.Contains(string(p.Spec), "debian-12") {
		t.Fatalf("profile made in the UI = %+v, %v", p, err)
	}
	eval[bool](b, `(window.confirm = () => true, true)`)
	b.run(chromedp.Click(chromedp.CSS(`[data-delete="medium"]`)), chromedp.WaitNotPresent(chromedp.CSS(`#profiles tr[data-key="medium"]`)))
	if _, err := c.ProfileGet(ctx, "medium"); err == nil {
		t.Fatal("the profile deleted in the UI still exists")
	}

	// The filters reach the API: a phase, a name that matches, one that
	// does not.
	b.open("#/runs?phase=Failed", `#runs tr[data-run="`+failed.ID+`"]`)
	if n := eval[int](b, `document.querySelectorAll('#runs tr[data-run]').length`); n != 1 {
		t.Fatalf("phase=Failed lists %d runs, want the one failed run", n)
	}
	b.open("#/runs?name=GATED", `#runs tr[data-run="`+run.ID+`"]`)
	b.open("#/runs?name=nothing-like-it", `#runs tr.empty`)

	// Phone width: readable, and no list scrolls sideways.
	b.run(chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile))
	for _, p := range pages {
		b.open(p.route, p.sel)
		b.noSideScroll(p.route)
		if p.name == "runs" || p.name == "souls" || p.name == "providers" {
			b.screenshot(p.name + "-phone")
		}
	}
	b.open("#/runs/"+run.ID, "#grid")
	b.noSideScroll("a run's page")
	b.screenshot("run-phone")
	b.run(chromedp.ResetViewport())

	// A token created in the UI is shown once, in full.
	b.open("#/tokens", "#token-create")
	b.run(chromedp.SendKeys(chromedp.CSS("#t-name"), "ci-deploy"), chromedp.Click(chromedp.CSS("#token-create button[type=submit]")),
		chromedp.WaitVisible(chromedp.CSS("#new-token")))
	plain := get(b, chromedp.Value(chromedp.CSS("#new-token")))
	if !strings.HasPrefix(plain, "sst_") {
		t.Fatalf("new token shown as %q", plain)
	}
	if probe, err := client.New(k.Addr, plain); err != nil {
		t.Fatal(err)
	} else if _, err := probe.RunList(ctx, client.RunListOptions{}); err != nil {
		t.Fatalf("the token the UI showed does not work: %v", err)
	}

	// The cookie alone opens nothing: a request with it but without the
	// session's key is refused, and nothing is created.
	if r := b.pageFetch("POST", "/v1/providers", `{"name":"nocsrf","driver":"local"}`, false); r.Status != http.StatusUnauthorized || r.Code != "auth.session_invalid" {
		t.Fatalf("POST without the session's key = %+v, want 401 auth.session_invalid", r)
	}
	if _, err := c.ProviderGet(ctx, "nocsrf"); err == nil {
		t.Fatal("a request without the CSRF value created a provider")
	}
	if r := b.pageFetch("POST", "/v1/providers", `{"name":"withcsrf","driver":"local"}`, true); r.Status != http.StatusCreated {
		t.Fatalf("POST with X-CSRF-Token = %+v, want 201", r)
	}

	// Another origin on the same host (same site: SameSite lets the cookie
	// go) posts to the keeper with the victim's cookie; it is refused. Its
	// server receives the keeper's cookie (browsers send cookies to every
	// port of a host), which opens nothing as a bearer token nor as a
	// cookie.
	var cookieMu sync.Mutex
	var stolen []string
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cookieMu.Lock()
		for _, ck := range r.Cookies() {
			if strings.Contains(ck.Name, "soulstack_session") {
				stolen = append(stolen, ck.Value)
			}
		}
		cookieMu.Unlock()
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<!doctype html><iframe name="sink" id="sink"></iframe>
<form id="f" method="POST" action="%s/v1/providers" enctype="text/plain" target="sink">
<input name='{"name":"evil","driver":"local","x":"' value='"}'></form>
<script>
fetch(%q, {method: 'POST', mode: 'no-cors', credentials: 'include', headers: {'Content-Type': 'text/plain'},
  body: '{"name":"evil2","driver":"local"}'}).catch(() => {}).finally(() => {
  document.getElementById('sink').onload = () => { document.title = 'sent'; };
  document.getElementById('f').submit();
});
</script>`, k.Addr, k.Addr+"/v1/providers")
	}))
	defer evil.Close()
	b.collect()
	b.run(chromedp.Navigate(evil.URL))
	get(b, chromedp.Poll[bool](`document.title === 'sent'`))
	b.open("#/providers", `#providers tr[data-key="lab"]`)
	for _, name := range []string{"evil", "evil2"} {
		if _, err := c.ProviderGet(ctx, name); err == nil {
			t.Fatalf("a page of another origin created provider %q with the session cookie", name)
		}
	}
	cookieMu.Lock()
	got := slices.Compact(slices.Sorted(slices.Values(stolen)))
	cookieMu.Unlock()
	if len(got) == 0 {
		t.Fatal("the other port's server received no session cookie: the attack's premise does not hold")
	}
	for _, v := range got {
		for _, h := range []map[string]string{{"Authorization": "Bearer " + v}, {"Cookie": "soulstack_session=" + v}} {
			req, _ := http.NewRequest("GET", k.Addr+"/v1/whoami", nil)
			for hk, hv := range h {
				req.Header.Set(hk, hv)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("the cookie the other port received opened the keeper with %v: %d", h, resp.StatusCode)
			}
		}
		if strings.HasPrefix(v, "sst_") {
			t.Fatalf("the session cookie is an API token")
		}
	}

	// The secrets never reached the browser: not the DOM, not any answer.
	bodies := b.bodies()
	if len(bodies) < 5 {
		t.Fatalf("recorded only %d API answers", len(bodies))
	}
	for u, bs := range bodies {
		for _, body := range bs {
			if strings.Contains(body, uiCanary) {
				t.Fatalf("API answer %s holds the canary: %s", u, body)
			}
		}
	}
	for _, route := range []string{"#/runs/" + run.ID, "#/providers", "#/audit"} {
		b.open(route, "h1")
		get(b, chromedp.Poll[bool](`!document.querySelector('main').textContent.includes('Loading')`))
		if strings.Contains(b.html(), uiCanary) {
			t.Fatalf("the DOM of %s holds the canary", route)
		}
	}
	var sawEvents bool
	for u := range bodies {
		sawEvents = sawEvents || strings.Contains(u, "/events")
	}
	if !sawEvents {
		t.Log("the event stream's body was not retrievable from the browser; its events were checked through the DOM")
	}

	// A viewer: no create or delete controls, and a forged delete is 403.
	b.signOut()
	b.signIn(viewer.Token)
	b.open("#/providers", `#providers tr[data-key="lab"]`)
	if controls := eval[int](b, `document.querySelectorAll('[data-delete], #provider-create').length`); controls != 0 {
		t.Fatalf("the viewer sees %d create/delete controls on providers", controls)
	}
	b.open("#/souls", `#souls tr[data-key="web-1.local.test"]`)
	if eval[int](b, `document.querySelectorAll('[data-delete]').length`) != 0 {
		t.Fatal("the viewer sees delete buttons on souls")
	}
	if eval[int](b, `document.querySelectorAll('#nav a[href="#/tokens"]').length`) != 0 {
		t.Fatal("the viewer's navigation offers the tokens page")
	}
	b.open("#/runs/"+run.ID, "#grid")
	if eval[int](b, `document.querySelectorAll('#cancel').length`) != 0 {
		t.Fatal("the viewer sees a cancel button")
	}
	b.open("#/providers", `#providers tr[data-key="lab"]`)
	b.screenshot("viewer-providers")
	if r := b.pageFetch("DELETE", "/v1/providers/lab", "", true); r.Status != http.StatusForbidden || r.Code != "auth.forbidden" {
		t.Fatalf("viewer's forged DELETE = %+v, want 403 auth.forbidden", r)
	}
	if r := b.pageFetch("POST", "/v1/tokens", `{"name":"escalate","role":"admin"}`, true); r.Status != http.StatusForbidden || r.Code != "auth.forbidden" {
		t.Fatalf("viewer's forged token create = %+v, want 403 auth.forbidden", r)
	}
	if _, err := c.ProviderGet(ctx, "lab"); err != nil {
		t.Fatalf("the viewer's forged delete removed the provider: %v", err)
	}

	// Signed out, the cookie no longer signs anything in.
	b.signOut()
	after := eval[fetchResult](b, `(async () => { const r = await fetch('/v1/whoami'); return {status: r.status, code: (await r.json()).code}; })()`)
	if after.Status != http.StatusUnauthorized {
		t.Fatalf("whoami after sign-out = %+v, want 401", after)
	}
	// The viewer token revoked while signed in: the UI falls back to sign-in.
	b.signIn(viewer.Token)
	if err := c.TokenRevoke(ctx, viewer.ID); err != nil {
		t.Fatal(err)
	}
	b.open("#/runs", "#token")

	// Nothing went wrong in the pages themselves, on any of them.
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.problems) > 0 {
		t.Fatalf("the pages reported %d problem(s):\n%s", len(b.problems), strings.Join(b.problems, "\n"))
	}
}
