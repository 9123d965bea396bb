package mcp

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/soulstack/soulstack/client"
)

// TestSchemaFor: a tool's schema carries the wire types' docs and enums,
// admits any JSON where the wire type holds raw JSON, and refuses unknown
// properties.
func TestSchemaFor(t *testing.T) {
	t.Parallel()
	s := schemaFor[runStarted]()
	b, _ := json.Marshal(s)
	var doc struct {
		AdditionalProperties any `json:"additionalProperties"`
		Properties           struct {
			Run struct {
				Properties map[string]struct {
					Type        any      `json:"type"`
					Description string   `json:"description"`
					Enum        []string `json:"enum"`
					AnyOf       []struct {
						Type any `json:"type"`
					} `json:"anyOf"`
				} `json:"properties"`
			} `json:"run"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	run := doc.Properties.Run.Properties
	if got := strings.Join(run["phase"].Enum, ","); got != "Pending,Running,AwaitingApproval,Succeeded,Failed,Cancelled,Rejected" {
		t.Errorf("phase enum %q", got)
	}
	if !strings.Contains(run["message"].Description, "Succeeded") {
		t.Errorf("message description %q", run["message"].Description)
	}
	// Raw JSON is any JSON value, said as one anyOf branch per type: {}
	// would be encoded as the boolean schema true, which MCP clients
	// refuse, and a type array is not portable (TestSchemasPortable).
	var types []string
	for _, b := range run["outputs"].AnyOf {
		if ty, ok := b.Type.(string); ok {
			types = append(types, ty)
		}
	}
	if run["outputs"].Type != nil || strings.Join(types, ",") != strings.Join(anyJSON, ",") {
		t.Errorf("outputs (raw JSON): type %v, anyOf types %v; want anyOf branches typed %v", run["outputs"].Type, types, anyJSON)
	}
	if doc.AdditionalProperties != false {
		t.Errorf("additionalProperties = %v, want false", doc.AdditionalProperties)
	}
	in, _ := json.Marshal(schemaFor[runStartInput]())
	if !strings.Contains(string(in), "Re-run key") || !strings.Contains(string(in), `"required":["scenario"]`) {
		t.Errorf("run_start input schema: %s", in)
	}
}

// TestInProcessStreams: the in-process transport hands the answer over as
// the handler writes it, so that an event stream reaches the tool while
// it lasts; the handler's context ends when the reader gives up.
func TestInProcessStreams(t *testing.T) {
	t.Parallel()
	ended := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.RemoteAddr != "192.0.2.7:4242" || r.Header.Get("Authorization") != "Bearer sst_x" || r.URL.Path != "/v1/runs/run_1/events" {
			http.Error(w, "bad request "+r.RemoteAddr+r.URL.Path, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done() // a stream that lasts until the reader leaves
		close(ended)
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://keeper.in-process/v1/runs/run_1/events", nil)
	req.Header.Set("Authorization", "Bearer sst_x")
	resp, err := (&http.Client{Transport: inProcess{h: h, remoteAddr: "192.0.2.7:4242"}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("answer %d %v", resp.StatusCode, resp.Header)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != "data: first\n" {
		t.Fatalf("first line %q %v", line, err)
	}
	cancel()
	resp.Body.Close()
	<-ended
}

// TestErrorOf: a tool error starts with the stable code and keeps the
// problem's located errors; an unknown failure says nothing of itself.
func TestErrorOf(t *testing.T) {
	t.Parallel()
	p := &client.Problem{Status: 422, Code: "scenario.invalid", Detail: "the scenario is invalid",
		Errors: []client.ProblemError{{Location: "a.yaml:3:5", Code: "module.unknown", Message: "no module core.x.y"}}}
	if got := errorOf(p).Error(); got != "scenario.invalid: the scenario is invalid\na.yaml:3:5: module.unknown: no module core.x.y" {
		t.Errorf("problem: %q", got)
	}
	if got := errorOf(io.ErrUnexpectedEOF).Error(); got != "mcp.internal: the keeper could not complete the call; see its log" {
		t.Errorf("internal: %q", got)
	}
}

// TestInProcessPanic: a handler that panics fails its request with 500;
// the process goes on.
func TestInProcessPanic(t *testing.T) {
	t.Parallel()
	h := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") })
	req, _ := http.NewRequest(http.MethodGet, "http://keeper.in-process/v1/souls", nil)
	resp, err := (&http.Client{Transport: inProcess{h: h}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusInternalServerError {
		t.Fatalf("status %d, want 500", resp.StatusCode)
	}
}

// TestSchemasPortable: every tool's input and output schema is in the
// subset every model provider takes (what the MCP Inspector's --strict
// lints, run against a keeper in internal/keeper): one type per schema,
// alternatives as anyOf, and no schema that constrains nothing.
func TestSchemasPortable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := New(Config{})
	ct, st := sdk.NewInMemoryTransports()
	if _, err := s.srv.Connect(ctx, st, nil); err != nil {
		t.Fatal(err)
	}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(tools.Tools) < 10 {
		t.Fatalf("%d tools listed", len(tools.Tools))
	}
	for _, tool := range tools.Tools {
		for kind, schema := range map[string]any{"input": tool.InputSchema, "output": tool.OutputSchema} {
			b, _ := json.Marshal(schema)
			var doc any
			if err := json.Unmarshal(b, &doc); err != nil {
				t.Fatal(err)
			}
			for _, problem := range unportable(doc, "") {
				t.Errorf("tool %s, %s schema: %s", tool.Name, kind, problem)
			}
		}
	}
}

// unportable lists what in schema s (at path) a single-type dialect
// cannot take.
func unportable(s any, path string) []string {
	m, ok := s.(map[string]any)
	if !ok {
		return []string{fmt.Sprintf("%s: %v is not a schema object", path, s)}
	}
	var out []string
	if _, isList := m["type"].([]any); isList {
		out = append(out, fmt.Sprintf("%s: type is a list %v", path, m["type"]))
	}
	constrains := false
	for _, k := range []string{"type", "enum", "const", "anyOf", "oneOf", "allOf", "not", "$ref", "properties", "items", "required", "additionalProperties", "minimum", "maximum", "pattern", "minLength", "maxLength", "minItems", "maxItems", "format"} {
		if _, ok := m[k]; ok {
			constrains = true
		}
	}
	if !constrains {
		out = append(out, fmt.Sprintf("%s: constrains nothing (%v)", path, m))
	}
	if props, ok := m["properties"].(map[string]any); ok {
		for name, sub := range props {
			out = append(out, unportable(sub, path+".properties."+name)...)
		}
	}
	for _, k := range []string{"items", "additionalProperties"} {
		if sub, ok := m[k].(map[string]any); ok {
			out = append(out, unportable(sub, path+"."+k)...)
		}
	}
	for _, k := range []string{"anyOf", "oneOf", "allOf"} {
		if list, ok := m[k].([]any); ok {
			for i, sub := range list {
				out = append(out, unportable(sub, fmt.Sprintf("%s.%s[%d]", path, k, i))...)
			}
		}
	}
	return out
}
