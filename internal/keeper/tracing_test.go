package keeper_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/bus/bustest"
	"github.com/soulstack/soulstack/internal/config"
	"github.com/soulstack/soulstack/internal/pki"
	"github.com/soulstack/soulstack/internal/sshtest"
)

// otlpReceiver is an OTLP/HTTP trace receiver on loopback: it keeps the
// spans it is sent and the raw bodies they came in.
type otlpReceiver struct {
	*httptest.Server
	mu       sync.Mutex
	spans    []*tracepb.Span
	services []string
	service  map[*tracepb.Span]string // the service.name of each span's resource
	raw      bytes.Buffer
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	r := &otlpReceiver{service: map[*tracepb.Span]string{}}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
			http.NotFound(w, req)
			return
		}
		var body io.Reader = http.MaxBytesReader(w, req.Body, 16<<20)
		if req.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		b, err := io.ReadAll(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var ex coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &ex); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.raw.Write(b)
		for _, rs := range ex.ResourceSpans {
			name := ""
			for _, a := range rs.GetResource().GetAttributes() {
				if a.Key == "service.name" {
					name = a.GetValue().GetStringValue()
					r.services = append(r.services, name)
				}
			}
			for _, ss := range rs.ScopeSpans {
				r.spans = append(r.spans, ss.Spans...)
				for _, sp := range ss.Spans {
					r.service[sp] = name
				}
			}
		}
		r.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(r.Close)
	return r
}

func attr(s *tracepb.Span, key string) string {
	for _, a := range s.Attributes {
		if a.Key == key {
			return a.GetValue().GetStringValue()
		}
	}
	return ""
}

// TestRunTraceOverSSH: with tracing.otlp_endpoint set, one run over SSH is
// one trace, exported to a real OTLP/HTTP receiver: the API request's
// server span, the time in the queue, the run (with its id), each step,
// each target and each SSH command, each the child of the one before;
// the run's secret input is in no span.
func TestRunTraceOverSSH(t *testing.T) {
	t.Parallel()
	rcv := newOTLPReceiver(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "keeper.yml")
	if err := os.WriteFile(cfg, []byte("tracing: {otlp_endpoint: "+rcv.URL+"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	k := serve(t, dir, "--config", cfg)
	c := adminClient(t, k, filepath.Join(dir, ".keeper"))
	addSoul(t, c, "h.local.test", sshtest.Start(t, sshtest.Options{}))
	const canary = "trace-canary-5f1e0c"
	sc := `inputs:
  token: {type: string, secret: true}
steps:
  - name: hello
    on: h.local.test
    module: core.command.ran
    params: {cmd: "test -n '${ input.token }' && echo hello"}
  - name: place
    on: h.local.test
    module: core.file.present
    params: {path: ` + filepath.Join(t.TempDir(), "placed") + `, content: "${ input.token }"}
`
	run, _, err := c.RunCreate(context.Background(), client.RunCreate{Scenario: sc, Input: map[string]any{"token": canary}})
	if err != nil {
		t.Fatal(err)
	}
	if final := waitFor(t, c, run.ID, "the run", func(r *client.Run) bool { return client.Terminal(r.Phase) }); final.Phase != "Succeeded" {
		t.Fatalf("run = %s %+v", final.Phase, final.Error)
	}
	raw, _ := os.ReadFile(filepath.Join(dir, ".keeper", "admin.token"))
	req, _ := http.NewRequest(http.MethodGet, k.Addr+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(raw)))
	req.Header.Set("Accept", "application/openmetrics-text; version=1.0.0")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	om, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	omType := resp.Header.Get("Content-Type")
	k.Interrupt(t) // flushes the exporter

	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	byName := map[string][]*tracepb.Span{}
	byID := map[string]*tracepb.Span{}
	for _, s := range rcv.spans {
		byName[s.Name] = append(byName[s.Name], s)
		byID[hex.EncodeToString(s.SpanId)] = s
	}
	one := func(name string) *tracepb.Span {
		t.Helper()
		for _, s := range byName[name] {
			if name != "POST /v1/runs" || s.Kind == tracepb.Span_SPAN_KIND_SERVER {
				return s
			}
		}
		t.Fatalf("no span %q among %d spans", name, len(rcv.spans))
		return nil
	}
	post, queue, runSpan := one("POST /v1/runs"), one("queue"), one("run")
	trace := hex.EncodeToString(post.TraceId)
	parentIs := func(child, parent *tracepb.Span) {
		t.Helper()
		if hex.EncodeToString(child.TraceId) != trace {
			t.Errorf("span %q is in trace %x, not the run's %s", child.Name, child.TraceId, trace)
		}
		if !bytes.Equal(child.ParentSpanId, parent.SpanId) {
			t.Errorf("span %q's parent is %x, want %q (%x)", child.Name, child.ParentSpanId, parent.Name, parent.SpanId)
		}
	}
	parentIs(queue, post)
	parentIs(runSpan, post)
	if attr(runSpan, "soulstack.run.id") != run.ID || attr(runSpan, "soulstack.run.phase") != "Succeeded" {
		t.Errorf("run span attributes: %v", runSpan.Attributes)
	}
	for _, step := range []string{"step hello", "step place"} {
		parentIs(one(step), runSpan)
	}
	targets := byName["target"]
	if len(targets) != 2 {
		t.Fatalf("%d target spans, want 2", len(targets))
	}
	for _, tg := range targets {
		if p := byID[hex.EncodeToString(tg.ParentSpanId)]; p == nil || !strings.HasPrefix(p.Name, "step ") || attr(tg, "soulstack.soul.sid") != "h.local.test" {
			t.Errorf("target span %v: parent %v", tg.Attributes, p)
		}
	}
	execs := byName["ssh.exec"]
	if len(execs) < 2 {
		t.Fatalf("%d ssh.exec spans, want one per command at least", len(execs))
	}
	for _, e := range execs {
		if p := byID[hex.EncodeToString(e.ParentSpanId)]; p == nil || p.Name != "target" {
			t.Errorf("ssh.exec span's parent = %v, want a target span", p)
		}
	}
	if len(rcv.services) == 0 || rcv.services[0] != "soulstack-keeper" {
		t.Errorf("service.name = %v", rcv.services)
	}
	// Asked for OpenMetrics, /metrics tied the POST's latency bucket to its
	// trace with an exemplar (scraped before the keeper stopped).
	if !strings.Contains(string(om), `# {trace_id="`+trace+`"}`) || !strings.Contains(omType, "openmetrics") {
		t.Errorf("no exemplar of trace %s in OpenMetrics (%s):\n%s", trace, omType, grepLines(string(om), "run-create"))
	}
	counts := map[string]int{}
	for n, ss := range byName {
		counts[n] = len(ss)
	}
	t.Logf("spans exported: %v", counts)
	if bytes.Contains(rcv.raw.Bytes(), []byte(canary)) {
		t.Fatal("the run's secret input is in an exported span")
	}
}

// TestResumedRunContinuesItsTrace: a run handed back by a stopping keeper
// and resumed by the next one stays one trace: the second execution's run
// span, like the first's, is a child of the POST /v1/runs span (the trace
// context is kept with the run, not only in its first queue job).
func TestResumedRunContinuesItsTrace(t *testing.T) {
	t.Parallel()
	rcv := newOTLPReceiver(t)
	dir := t.TempDir()
	cfg := keeperConfig(t, dir, "tracing: {otlp_endpoint: "+rcv.URL+"}\n")
	k := serve(t, dir, "--config", cfg)
	c := adminClient(t, k, filepath.Join(dir, ".keeper"))
	addSoul(t, c, "h.local.test", sshtest.Start(t, sshtest.Options{}))
	started := filepath.Join(t.TempDir(), "started")
	run, _, err := c.RunCreate(context.Background(), client.RunCreate{Scenario: `steps:
  - name: first
    on: h.local.test
    module: core.command.ran
    params: {cmd: "touch ` + started + `; sleep 2"}
  - name: second
    on: h.local.test
    module: core.command.ran
    params: {cmd: "echo second"}
`})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, c, run.ID, "the first step to start", func(*client.Run) bool {
		_, err := os.Stat(started)
		return err == nil
	})
	k.Interrupt(t) // drains: the first step finishes, the run is handed back
	k = serve(t, dir, "--config", cfg)
	c = adminClient(t, k, filepath.Join(dir, ".keeper"))
	if final := waitRun(t, c, run.ID); final.Phase != client.PhaseSucceeded {
		t.Fatalf("the resumed run = %s %+v", final.Phase, final.Error)
	}
	k.Interrupt(t)

	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	var post *tracepb.Span
	var runs []*tracepb.Span
	for _, s := range rcv.spans {
		switch {
		case s.Name == "POST /v1/runs" && s.Kind == tracepb.Span_SPAN_KIND_SERVER:
			post = s
		case s.Name == "run" && attr(s, "soulstack.run.id") == run.ID:
			runs = append(runs, s)
		}
	}
	if post == nil || len(runs) != 2 {
		t.Fatalf("POST span %v, %d run spans; want one and two", post, len(runs))
	}
	for i, r := range runs {
		if !bytes.Equal(r.TraceId, post.TraceId) || !bytes.Equal(r.ParentSpanId, post.SpanId) {
			t.Errorf("execution %d: trace %x parent %x; want the request's trace %x and span %x", i+1, r.TraceId, r.ParentSpanId, post.TraceId, post.SpanId)
		}
	}
}

// TestRunTraceOverAgent: a run on a soul reached through its agent is one
// trace across both processes: the keeper's target span has an agent.exec
// span whose trace context travels in the bus message, and the agent's
// own span (exported by the agent process) is its child.
func TestRunTraceOverAgent(t *testing.T) {
	t.Parallel()
	rcv := newOTLPReceiver(t)
	dir := t.TempDir()
	data := filepath.Join(dir, ".keeper")
	port := freePort(t)
	cfg := keeperConfig(t, dir, fmt.Sprintf("nats:\n  listen: 127.0.0.1:%d\n  heartbeat: 300ms\ntracing: {otlp_endpoint: %s}\n", port, rcv.URL))
	k := serve(t, dir, "--config", cfg)
	c := adminClient(t, k, data)
	const sid = "traced.local.test"
	if _, err := c.SoulCreate(context.Background(), client.SoulCreate{SID: sid, Address: "127.0.0.1", Connection: client.Connection{Port: closedPort(t)}}); err != nil {
		t.Fatal(err)
	}
	ca, err := pki.LoadOrCreateCA(config.Config{DataDir: data}.TLSDir(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	id := bustest.Issue(t, ca, sid, time.Hour, time.Now())
	recordSerial(t, config.Config{DataDir: data}, sid, id.Serial)
	agents := bustest.StartAgents(t, bustest.AgentSpec{URLs: []string{fmt.Sprintf("tls://127.0.0.1:%d", port)}, Identities: []bustest.Identity{id},
		Heartbeat: 300 * time.Millisecond, Jitter: -1, Spool: t.TempDir(), OTLPEndpoint: rcv.URL})
	waitSoul(t, c, sid, func(s client.Soul) bool { return s.Status == "active" })
	run, _, err := c.RunCreate(context.Background(), client.RunCreate{Scenario: "steps:\n  - name: hello\n    on: " + sid + "\n    module: core.command.ran\n    params: {cmd: 'echo over the agent'}\n"})
	if err != nil {
		t.Fatal(err)
	}
	if final := waitFor(t, c, run.ID, "the run", func(r *client.Run) bool { return client.Terminal(r.Phase) }); final.Phase != "Succeeded" {
		t.Fatalf("run = %s %+v", final.Phase, final.Error)
	}
	k.Interrupt(t)
	if !agents.Stop() {
		t.Fatal("the agent did not stop on SIGTERM")
	}

	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	var target, exec, cmd *tracepb.Span
	for _, s := range rcv.spans {
		switch {
		case s.Name == "target" && attr(s, "soulstack.soul.sid") == sid:
			target = s
		case s.Name == "agent.exec" && rcv.service[s] == "soulstack-keeper":
			exec = s
		case s.Name == "agent.command" && rcv.service[s] == "soulstack-soul":
			cmd = s
		}
	}
	if target == nil || exec == nil || cmd == nil {
		t.Fatalf("spans: target %v, keeper's agent.exec %v, agent's agent.command %v (of %d)", target != nil, exec != nil, cmd != nil, len(rcv.spans))
	}
	if !bytes.Equal(exec.ParentSpanId, target.SpanId) || !bytes.Equal(cmd.ParentSpanId, exec.SpanId) {
		t.Errorf("parents: agent.exec's %x (target %x), agent.command's %x (agent.exec %x)", exec.ParentSpanId, target.SpanId, cmd.ParentSpanId, exec.SpanId)
	}
	if !bytes.Equal(cmd.TraceId, target.TraceId) {
		t.Errorf("the agent's span is in trace %x, the run's is %x", cmd.TraceId, target.TraceId)
	}
}
