package mcp

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

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
	// Raw JSON is any JSON value, said as the list of types: {} would be
	// encoded as the boolean schema true, which MCP clients refuse.
	if types, _ := run["outputs"].Type.([]any); len(types) != len(anyJSON) {
		t.Errorf("outputs (raw JSON) typed %v, want %v", run["outputs"].Type, anyJSON)
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
