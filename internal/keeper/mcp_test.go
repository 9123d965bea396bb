package keeper_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/cli"
	"github.com/soulstack/soulstack/internal/keepertest"
	"github.com/soulstack/soulstack/internal/sshtest"
)

// mcpTools is every tool the keeper serves.
var mcpTools = []string{
	"audit_verify", "module_show", "modules_list", "profile_get", "profiles_list", "provider_get", "providers_list",
	"run_approve", "run_cancel", "run_get", "run_reject", "run_start", "run_wait", "runs_list", "scenario_validate", "soul_get", "souls_list",
}

// The canaries: a secret run input and a provider credential in the
// driver config. Neither may appear in any tool result.
const (
	canaryInput    = "canary-input-5d1f0c9e7b"
	canaryProvider = "canary-provider-83a2e64f1c"
)

// mcpKeeper is a real keeper with MCP, a real sshd as soul web-1.local.test,
// a provider whose config holds a credential, and tokens of each role.
type mcpKeeper struct {
	k                         *proc
	admin                     *client.Client
	adminTok, operTok, viewer string
	operID                    string
}

func startMCPKeeper(t *testing.T, allowWrites bool) *mcpKeeper {
	t.Helper()
	s := spawn(t, keepertest.Options{YAML: "mcp:\n  allow_writes: " + map[bool]string{true: "true", false: "false"}[allowWrites] + "\n"})
	k, data, admin := s.Proc, s.Data, s.Admin
	srv := sshtest.Start(t, sshtest.Options{})
	addSoul(t, admin, "web-1.local.test", srv)
	ctx := context.Background()
	if _, err := admin.ProviderCreate(ctx, client.ProviderCreate{Name: "lab", Driver: "local", Config: map[string]any{"api_token": canaryProvider, "zone": "a"}}); err != nil {
		t.Fatal(err)
	}
	mk := &mcpKeeper{k: k, admin: admin, adminTok: adminToken(t, data)}
	op, err := admin.TokenCreate(ctx, client.TokenCreate{Name: "model-op", Role: "operator"})
	if err != nil {
		t.Fatal(err)
	}
	vw, err := admin.TokenCreate(ctx, client.TokenCreate{Name: "model-view", Role: "viewer"})
	if err != nil {
		t.Fatal(err)
	}
	mk.operTok, mk.operID, mk.viewer = op.Token, op.ID, vw.Token
	return mk
}

// bearerTransport adds a token to every request.
type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// progressLog collects the progress notifications a client receives.
type progressLog struct {
	mu   sync.Mutex
	msgs []string
}

func (p *progressLog) handler(_ context.Context, req *sdk.ProgressNotificationClientRequest) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.msgs = append(p.msgs, req.Params.Message)
}

func (p *progressLog) all() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.msgs)
}

// await waits until the notifications received are want, in order: the
// client handles notifications apart from results, so the last ones may
// arrive just after run_wait's result.
func (p *progressLog) await(t *testing.T, want ...string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := p.all()
		if slices.Equal(got, want) {
			return
		}
		if len(got) > len(want) || time.Now().After(deadline) {
			t.Fatalf("progress notifications %q, want %q", got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// connectHTTP opens an MCP session with the keeper's /mcp, the SDK's own
// client over streamable HTTP.
func connectHTTP(ctx context.Context, k *proc, token string, pl *progressLog) (*sdk.ClientSession, error) {
	opts := &sdk.ClientOptions{}
	if pl != nil {
		opts.ProgressNotificationHandler = pl.handler
	}
	c := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, opts)
	return c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: k.Addr + "/mcp", HTTPClient: &http.Client{Transport: bearerTransport{token}}, MaxRetries: -1}, nil)
}

// connectStdio starts `soulctl mcp` as a subprocess and opens an MCP
// session with it over its stdin and stdout.
func connectStdio(ctx context.Context, t *testing.T, k *proc, token string, pl *progressLog) (*sdk.ClientSession, error) {
	t.Helper()
	cmd := exec.Command(soulctlBinary(t), "mcp")
	cmd.Env = append(os.Environ(), "SOULSTACK_KEEPER="+k.Addr, "SOULSTACK_TOKEN="+token)
	cmd.Dir = t.TempDir()
	opts := &sdk.ClientOptions{}
	if pl != nil {
		opts.ProgressNotificationHandler = pl.handler
	}
	c := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, opts)
	return c.Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
}

// soulctlBinary builds soulctl once for the tests that run it.
func soulctlBinary(t *testing.T) string {
	t.Helper()
	return bins.Path(t, "cmd/soulctl")
}

// callTool calls a tool and returns its result's text and structured
// content as one string, failing the test on a protocol error and on any
// canary in it.
func callTool(ctx context.Context, t *testing.T, s *sdk.ClientSession, name string, args map[string]any, progress any) *sdk.CallToolResult {
	t.Helper()
	params := &sdk.CallToolParams{Name: name, Arguments: args}
	if progress != nil {
		params.SetProgressToken(progress)
	}
	res, err := s.CallTool(ctx, params)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	all := resultText(res)
	for _, canary := range []string{canaryInput, canaryProvider} {
		if strings.Contains(all, canary) {
			t.Errorf("%s: the canary %s is in the result:\n%s", name, canary, all)
		}
	}
	return res
}

func resultText(res *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
			b.WriteByte('\n')
		}
	}
	if res.StructuredContent != nil {
		j, _ := json.Marshal(res.StructuredContent)
		b.Write(j)
	}
	return b.String()
}

// structured decodes a result's structured content into v.
func structured(t *testing.T, res *sdk.CallToolResult, v any) {
	t.Helper()
	if res.IsError {
		t.Fatalf("tool error: %s", resultText(res))
	}
	j, err := json.Marshal(res.StructuredContent)
	if err == nil {
		err = json.Unmarshal(j, v)
	}
	if err != nil {
		t.Fatalf("structured content %s: %v", j, err)
	}
}

// refused requires a tool error whose text starts with code.
func refused(t *testing.T, res *sdk.CallToolResult, code string) {
	t.Helper()
	text := resultText(res)
	if !res.IsError || !strings.HasPrefix(text, code+": ") {
		t.Fatalf("want a tool error %s, got (error %v) %s", code, res.IsError, text)
	}
}

const mcpScenario = `name: mcp-hello
inputs:
  pin: {type: string, secret: true}
steps:
  - name: greet
    on: web-1.local.test
    module: core.command.ran
    params:
      cmd: "echo pin is ${ input.pin }"
  - name: later
    on: web-1.local.test
    when: "false"
    module: core.command.ran
    params: {cmd: "true"}
`

// exerciseMCP drives every tool through one session of an operator token
// and checks what a model relies on: the tools and their schemas, a
// validation with located problems, a run started and waited for with a
// progress notification per step, and no canary anywhere.
func exerciseMCP(ctx context.Context, t *testing.T, mk *mcpKeeper, s *sdk.ClientSession, pl *progressLog, key string) {
	t.Helper()
	var names []string
	for tool, err := range s.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tool.Name)
		schema, _ := json.Marshal(tool.InputSchema)
		var in struct {
			Type       string         `json:"type"`
			Properties map[string]any `json:"properties"`
		}
		_ = json.Unmarshal(schema, &in)
		if in.Type != "object" || tool.Description == "" || tool.OutputSchema == nil {
			t.Errorf("tool %s: input schema %s, description %q, output schema %v", tool.Name, schema, tool.Description, tool.OutputSchema)
		}
		for what, sc := range map[string]any{"input": tool.InputSchema, "output": tool.OutputSchema} {
			b, _ := json.Marshal(sc)
			if where := booleanSchema(b); where != "" {
				t.Errorf("tool %s: its %s schema holds the boolean schema true at %s (the TypeScript SDK refuses it)", tool.Name, what, where)
			}
		}
		if tool.Name == "run_start" {
			for _, p := range []string{"scenario", "input", "key", "timeout"} {
				if in.Properties[p] == nil {
					t.Errorf("run_start's schema lacks %s: %s", p, schema)
				}
			}
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, mcpTools) {
		t.Fatalf("tools = %v, want %v", names, mcpTools)
	}

	// Reads, each through REST's masking.
	var souls client.SoulList
	structured(t, callTool(ctx, t, s, "souls_list", nil, nil), &souls)
	if len(souls.Items) != 1 || souls.Items[0].SID != "web-1.local.test" {
		t.Fatalf("souls_list = %+v", souls)
	}
	var prov client.Provider
	structured(t, callTool(ctx, t, s, "provider_get", map[string]any{"name": "lab"}, nil), &prov)
	if !strings.Contains(string(prov.Config), `"zone":"a"`) {
		t.Fatalf("provider_get config = %s", prov.Config)
	}
	callTool(ctx, t, s, "providers_list", nil, nil)
	callTool(ctx, t, s, "profiles_list", nil, nil)
	refused(t, callTool(ctx, t, s, "profile_get", map[string]any{"name": "nope"}, nil), "profile.not_found")
	refused(t, callTool(ctx, t, s, "soul_get", map[string]any{"sid": "nope.local.test"}, nil), "soul.not_found")
	// Arguments that do not match the schema are tool errors with a code.
	refused(t, callTool(ctx, t, s, "soul_get", map[string]any{"sid": 5}, nil), "mcp.invalid_arguments")
	refused(t, callTool(ctx, t, s, "soul_get", map[string]any{"sid": "x.local.test", "nope": 1}, nil), "mcp.invalid_arguments")
	refused(t, callTool(ctx, t, s, "soul_get", nil, nil), "mcp.invalid_arguments")
	var page struct {
		ID   string `json:"id"`
		Page string `json:"page"`
	}
	structured(t, callTool(ctx, t, s, "module_show", map[string]any{"id": "core.command.ran"}, nil), &page)
	if page.ID != "core.command.ran" || !strings.Contains(page.Page, "core.command.ran") || !strings.Contains(page.Page, "creates") {
		t.Fatalf("module_show page:\n%s", page.Page)
	}
	var mods struct {
		Items []struct{ ID, Side string } `json:"items"`
	}
	structured(t, callTool(ctx, t, s, "modules_list", nil, nil), &mods)
	if len(mods.Items) < 5 {
		t.Fatalf("modules_list = %+v", mods)
	}

	// Validation: every problem, located.
	var v struct {
		Valid    bool                  `json:"valid"`
		Problems []client.ProblemError `json:"problems"`
	}
	bad := "steps:\n  - name: a\n    on: web-1.local.test\n    module: core.nope.ran\n  - name: a\n    on: keeper\n    module: core.command.ran\n    params: {cmd: true, bogus: 1}\n"
	structured(t, callTool(ctx, t, s, "scenario_validate", map[string]any{"scenario": bad, "file": "bad.yaml"}, nil), &v)
	if v.Valid || len(v.Problems) < 2 {
		t.Fatalf("scenario_validate = %+v", v)
	}
	for _, p := range v.Problems {
		if !strings.HasPrefix(p.Location, "bad.yaml:") || strings.Count(p.Location, ":") != 2 || p.Code == "" {
			t.Errorf("problem not located as file:line:column with a code: %+v", p)
		}
	}
	// An undeclared ${ input.nope } is reported as a run would report it.
	undeclared := "steps:\n  - name: a\n    on: web-1.local.test\n    module: core.command.ran\n    params: {cmd: \"echo ${ input.nope }\"}\n"
	v.Problems = nil
	structured(t, callTool(ctx, t, s, "scenario_validate", map[string]any{"scenario": undeclared, "file": "u.yaml"}, nil), &v)
	if v.Valid || len(v.Problems) != 1 || v.Problems[0].Code != "scenario.unknown_input_reference" || v.Problems[0].Location != "u.yaml:5:28" {
		t.Fatalf("scenario_validate of an undeclared input reference = %+v", v)
	}
	if _, _, err := mk.admin.RunCreate(ctx, client.RunCreate{Scenario: undeclared, File: "u.yaml"}); err == nil || !strings.Contains(err.Error(), "scenario.unknown_input_reference") {
		t.Fatalf("a run of it: %v", err)
	}
	structured(t, callTool(ctx, t, s, "scenario_validate", map[string]any{"scenario": mcpScenario, "input": map[string]any{"pin": canaryInput}}, nil), &v)
	if !v.Valid {
		t.Fatalf("valid scenario refused: %+v", v.Problems)
	}

	// A run, started and waited for with progress.
	var started struct {
		Created bool       `json:"created"`
		Run     client.Run `json:"run"`
	}
	structured(t, callTool(ctx, t, s, "run_start", map[string]any{"scenario": mcpScenario, "input": map[string]any{"pin": canaryInput}, "key": key}, nil), &started)
	if !started.Created || started.Run.ID == "" {
		t.Fatalf("run_start = %+v", started)
	}
	var final client.Run
	structured(t, callTool(ctx, t, s, "run_wait", map[string]any{"id": started.Run.ID, "timeout_seconds": 120}, "wait-1"), &final)
	if final.Phase != client.PhaseSucceeded || len(final.Steps) != 2 || final.Steps[1].Status != client.StepSkipped {
		t.Fatalf("run_wait = %+v", final)
	}
	if !strings.Contains(string(final.Outputs), "pin is ***") {
		t.Fatalf("outputs not masked as REST masks them: %s", final.Outputs)
	}
	pl.await(t, "step greet (core.command.ran) started on web-1.local.test", "step greet changed: changed=1",
		"step later (core.command.ran) started on web-1.local.test", "step later skipped: skipped=1", "run Succeeded")
	// The same key and content: the same run, nothing ran again.
	structured(t, callTool(ctx, t, s, "run_start", map[string]any{"scenario": mcpScenario, "input": map[string]any{"pin": canaryInput}, "key": key}, nil), &started)
	if started.Created || started.Run.ID != final.ID {
		t.Fatalf("run_start again = %+v", started)
	}
	var got client.Run
	structured(t, callTool(ctx, t, s, "run_get", map[string]any{"id": final.ID}, nil), &got)
	if got.ID != final.ID || got.Phase != client.PhaseSucceeded {
		t.Fatalf("run_get = %+v", got)
	}
	callTool(ctx, t, s, "runs_list", nil, nil)
	refused(t, callTool(ctx, t, s, "run_cancel", map[string]any{"id": final.ID}, nil), "run.finished")
	// An operator holds no run.approve (TestApprovals decides over MCP).
	refused(t, callTool(ctx, t, s, "run_approve", map[string]any{"id": final.ID, "reason": "ok"}, nil), "auth.forbidden")
	refused(t, callTool(ctx, t, s, "run_reject", map[string]any{"id": final.ID, "reason": "no"}, nil), "auth.forbidden")
	var report client.AuditReport
	structured(t, callTool(ctx, t, s, "audit_verify", nil, nil), &report)
	if !report.OK || report.Checked == 0 {
		t.Fatalf("audit_verify = %+v", report)
	}
}

func TestMCPOverHTTP(t *testing.T) {
	t.Parallel()
	mk := startMCPKeeper(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	pl := &progressLog{}
	s, err := connectHTTP(ctx, mk.k, mk.operTok, pl)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	exerciseMCP(ctx, t, mk, s, pl, "mcp-http")

	// A viewer reads but may not start or cancel runs.
	vs, err := connectHTTP(ctx, mk.k, mk.viewer, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer vs.Close()
	refused(t, callTool(ctx, t, vs, "run_start", map[string]any{"scenario": mcpScenario, "input": map[string]any{"pin": canaryInput}}, nil), "auth.forbidden")
	refused(t, callTool(ctx, t, vs, "run_cancel", map[string]any{"id": "run_x"}, nil), "auth.forbidden")
	callTool(ctx, t, vs, "runs_list", nil, nil)

	// Every call was audited as mcp.called with its tool, under the
	// caller's token, and no audit payload holds a canary.
	audit, err := mk.admin.AuditList(ctx, client.AuditListOptions{ListOptions: client.ListOptions{Limit: 500}})
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]string{} // tool -> actor, for the operator's calls
	refusedStarts := 0
	for _, e := range audit.Items {
		for _, canary := range []string{canaryInput, canaryProvider} {
			if strings.Contains(string(e.Payload), canary) {
				t.Errorf("audit row %d holds a canary: %s", e.Seq, e.Payload)
			}
		}
		if e.Action != "mcp.called" {
			continue
		}
		var p struct {
			Tool string `json:"tool"`
			OK   bool   `json:"ok"`
			Code string `json:"code"`
		}
		_ = json.Unmarshal(e.Payload, &p)
		if e.ActorAID == mk.operID {
			calls[p.Tool] = e.ActorAID
		}
		if p.Tool == "run_start" && p.Code == "auth.forbidden" {
			refusedStarts++
		}
	}
	for _, tool := range mcpTools {
		if _, ok := calls[tool]; !ok {
			t.Errorf("no mcp.called audit row of the operator for %s", tool)
		}
	}
	if refusedStarts != 1 {
		t.Errorf("%d audited refusals of the viewer's run_start, want 1", refusedStarts)
	}
}

// TestMCPRefusesBadTokens: /mcp answers no token and a wrong token with
// 401 before any MCP session exists, as REST does.
func TestMCPRefusesBadTokens(t *testing.T) {
	t.Parallel()
	mk := startMCPKeeper(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, token := range []string{"", "sst_notatoken", mk.adminTok + "x"} {
		if s, err := connectHTTP(ctx, mk.k, token, nil); err == nil {
			s.Close()
			t.Errorf("token %q: an MCP session was opened", token)
		}
	}
	req, _ := http.NewRequest(http.MethodPost, mk.k.Addr+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	req.Header.Set("Authorization", "Bearer sst_wrong")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var p client.Problem
	_ = json.NewDecoder(resp.Body).Decode(&p)
	if resp.StatusCode != http.StatusUnauthorized || p.Code != "auth.invalid_token" {
		t.Fatalf("wrong token: %d %+v", resp.StatusCode, p)
	}
	// A client that follows the MCP authorization spec finds the
	// resource's metadata (RFC 9728), which says how to get a token.
	challenge := resp.Header.Get("WWW-Authenticate")
	m := regexp.MustCompile(`resource_metadata="([^"]+)"`).FindStringSubmatch(challenge)
	if m == nil || !strings.HasPrefix(challenge, "Bearer ") || m[1] != mk.k.Addr+"/.well-known/oauth-protected-resource" {
		t.Fatalf("WWW-Authenticate = %q", challenge)
	}
	for _, path := range []string{m[1], m[1] + "/mcp"} {
		mr, err := http.Get(path)
		if err != nil {
			t.Fatal(err)
		}
		var meta struct {
			Resource     string   `json:"resource"`
			Bearer       []string `json:"bearer_methods_supported"`
			Instructions string   `json:"soulstack_token_instructions"`
		}
		err = json.NewDecoder(mr.Body).Decode(&meta)
		mr.Body.Close()
		if err != nil || mr.StatusCode != 200 || meta.Resource != mk.k.Addr+"/mcp" || !slices.Equal(meta.Bearer, []string{"header"}) || !strings.Contains(meta.Instructions, "soulctl token create") {
			t.Fatalf("GET %s = %d %+v, %v", path, mr.StatusCode, meta, err)
		}
	}
	// Over stdio the keeper's refusal stops soulctl mcp, which says the
	// keeper's code and message and exits cli.ExitAuth (77).
	if s, err := connectStdio(ctx, t, mk.k, "sst_notatoken", nil); err == nil {
		s.Close()
		t.Error("soulctl mcp served with a wrong token")
	}
	cmd := exec.Command(soulctlBinary(t), "mcp")
	cmd.Env = append(os.Environ(), "SOULSTACK_KEEPER="+mk.k.Addr, "SOULSTACK_TOKEN=sst_notatoken")
	cmd.Dir = t.TempDir()
	var stderr bytes.Buffer
	cmd.Stdin, cmd.Stderr = strings.NewReader(""), &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != cli.ExitAuth || !strings.Contains(stderr.String(), "auth.invalid_token: ") {
		t.Fatalf("soulctl mcp with a wrong token: %v, stderr %q; want exit %d with the keeper's auth.invalid_token", err, stderr.String(), cli.ExitAuth)
	}
}

// TestMCPWritesDisabled: without mcp.allow_writes even the admin token is
// refused run_start and run_cancel with mcp.writes_disabled, nothing runs,
// and reads still work.
func TestMCPWritesDisabled(t *testing.T) {
	t.Parallel()
	mk := startMCPKeeper(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := connectHTTP(ctx, mk.k, mk.adminTok, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	refused(t, callTool(ctx, t, s, "run_start", map[string]any{"scenario": mcpScenario, "input": map[string]any{"pin": canaryInput}}, nil), "mcp.writes_disabled")
	refused(t, callTool(ctx, t, s, "run_cancel", map[string]any{"id": "run_x"}, nil), "mcp.writes_disabled")
	refused(t, callTool(ctx, t, s, "run_approve", map[string]any{"id": "run_x", "reason": "ok"}, nil), "mcp.writes_disabled")
	runs, err := mk.admin.RunList(ctx, client.RunListOptions{})
	if err != nil || len(runs.Items) != 0 {
		t.Fatalf("runs after refused writes: %+v %v", runs, err)
	}
	var report client.AuditReport
	structured(t, callTool(ctx, t, s, "audit_verify", nil, nil), &report)
	if !report.OK {
		t.Fatalf("audit_verify = %+v", report)
	}
}

// TestMCPOverStdio: soulctl mcp, a real subprocess, serves the keeper's
// tools on stdio to the SDK's client: the same tools and schemas, a run
// with progress forwarded, the viewer refused.
func TestMCPOverStdio(t *testing.T) {
	t.Parallel()
	mk := startMCPKeeper(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pl := &progressLog{}
	s, err := connectStdio(ctx, t, mk.k, mk.operTok, pl)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	exerciseMCP(ctx, t, mk, s, pl, "mcp-stdio")

	vs, err := connectStdio(ctx, t, mk.k, mk.viewer, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer vs.Close()
	res := callTool(ctx, t, vs, "run_start", map[string]any{"scenario": mcpScenario, "input": map[string]any{"pin": canaryInput}}, nil)
	refused(t, res, "auth.forbidden")
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("timed out")
	}
}

// TestMCPSessionBoundToToken performs two attacks on a real keeper: a
// viewer presents an operator's MCP session id to start a run in it, and
// an operator whose token was revoked goes on using its open session.
// Both are refused and nothing runs.
func TestMCPSessionBoundToToken(t *testing.T) {
	t.Parallel()
	mk := startMCPKeeper(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := connectHTTP(ctx, mk.k, mk.operTok, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	callTool(ctx, t, s, "runs_list", nil, nil)

	args, _ := json.Marshal(map[string]any{"scenario": mcpScenario, "input": map[string]any{"pin": canaryInput}})
	body := `{"jsonrpc":"2.0","id":99,"method":"tools/call","params":{"name":"run_start","arguments":` + string(args) + `}}`
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, mk.k.Addr+"/mcp", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+mk.viewer)
	req.Header.Set("Mcp-Session-Id", s.ID())
	req.Header.Set("Mcp-Protocol-Version", s.InitializeResult().ProtocolVersion)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("another token in the operator's session: %d, want 403", resp.StatusCode)
	}

	if err := mk.admin.TokenRevoke(ctx, mk.operID); err != nil {
		t.Fatal(err)
	}
	res, err := s.CallTool(ctx, &sdk.CallToolParams{Name: "run_start", Arguments: map[string]any{"scenario": mcpScenario, "input": map[string]any{"pin": canaryInput}}})
	if err == nil && !res.IsError {
		t.Fatalf("a revoked token's session started a run: %s", resultText(res))
	}
	runs, err := mk.admin.RunList(ctx, client.RunListOptions{})
	if err != nil || len(runs.Items) != 0 {
		t.Fatalf("runs after the attacks: %+v %v", runs, err)
	}
}

// TestMCPSessionDoesNotHoldShutdown: a keeper stopped while an MCP client
// holds a session open (its standing event stream) exits cleanly, without
// waiting for the client to leave.
func TestMCPSessionDoesNotHoldShutdown(t *testing.T) {
	t.Parallel()
	mk := startMCPKeeper(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := connectHTTP(ctx, mk.k, mk.viewer, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	callTool(ctx, t, s, "souls_list", nil, nil)
	mk.k.Interrupt(t)
}

// booleanSchema returns where in the JSON schema doc a subschema is the
// boolean true ("" when none is): under properties, items,
// additionalProperties, prefixItems, anyOf, oneOf or allOf.
func booleanSchema(doc []byte) string {
	var v any
	if json.Unmarshal(doc, &v) != nil {
		return "(not JSON)"
	}
	var walk func(v any, at string) string
	walk = func(v any, at string) string {
		if b, ok := v.(bool); ok {
			if b {
				return at
			}
			return ""
		}
		m, ok := v.(map[string]any)
		if !ok {
			return ""
		}
		if props, ok := m["properties"].(map[string]any); ok {
			for k, sub := range props {
				if w := walk(sub, at+".properties."+k); w != "" {
					return w
				}
			}
		}
		for _, k := range []string{"items", "additionalProperties"} {
			if sub, ok := m[k]; ok {
				if w := walk(sub, at+"."+k); w != "" {
					return w
				}
			}
		}
		for _, k := range []string{"prefixItems", "anyOf", "oneOf", "allOf"} {
			list, _ := m[k].([]any)
			for i, sub := range list {
				if w := walk(sub, fmt.Sprintf("%s.%s[%d]", at, k, i)); w != "" {
					return w
				}
			}
		}
		return ""
	}
	return walk(v, "$")
}
