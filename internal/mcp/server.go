// Package mcp serves the Operator API over the Model Context Protocol at
// the keeper's /mcp (streamable HTTP, the official Go SDK). Its tools are
// the REST API seen by a model: each tool calls the keeper's own REST
// handler in process with the caller's bearer token (inProcess), so that
// authentication, RBAC, validation, the audit of mutations and the masking
// of every answer are the REST API's, not a second copy. On top of REST it
// adds what belongs to MCP: writes (run_start, run_cancel) are refused
// unless the keeper enables them (mcp.allow_writes), every call is audited
// as mcp.called with its tool name, and run_wait reports each step as a
// progress notification.
package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/soulstack/soulstack/internal/base"

	"github.com/google/jsonschema-go/jsonschema"
	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/api"
	"github.com/soulstack/soulstack/internal/auth"
	"github.com/soulstack/soulstack/internal/runner"
	"github.com/soulstack/soulstack/internal/secret"
	"github.com/soulstack/soulstack/internal/store"
)

// Error codes of MCP's own refusals (tool errors, not protocol errors).
const (
	// CodeWritesDisabled: a write tool was called and the keeper does not
	// allow writes over MCP (mcp.allow_writes is false).
	CodeWritesDisabled = "mcp.writes_disabled"
	// CodeInternal: the tool failed for a reason of the keeper's own.
	CodeInternal = "mcp.internal"
	// CodeInvalidArguments: the call's arguments do not match the tool's
	// input schema (unknown, missing or mistyped).
	CodeInvalidArguments = "mcp.invalid_arguments"
)

// ActionCalled is the audit action of every tool call.
const ActionCalled = "mcp.called"

// Auditor appends audit events; store.Store implements it.
type Auditor interface {
	AuditRecord(ctx context.Context, p store.AuditParams) error
}

// Config wires the MCP server.
type Config struct {
	// API is the Operator API: it authenticates /mcp's requests (Guard)
	// and serves the tools' calls.
	API *api.Server
	// Check validates scenarios for scenario_validate, the checker POST
	// /v1/runs uses; nil: scenario_validate reports that it is unavailable.
	Check runner.Checker
	// Audit records mcp.called.
	Audit Auditor
	// Secrets are the keeper's secrets, masked in what the tools answer
	// themselves (the API masks what it answers); nil: none.
	Secrets *secret.Keeper
	// AllowWrites enables run_start and run_cancel (mcp.allow_writes);
	// the token must still hold run.create / run.cancel.
	AllowWrites bool
	Version     string
	// Base is the server's logger and clock.
	base.Base
}

// Server is the keeper's MCP server.
type Server struct {
	cfg Config
	log *slog.Logger
	srv *sdk.Server
}

// New builds the MCP server and its tools.
func New(cfg Config) *Server {
	cfg.Init()
	log := cfg.Log
	s := &Server{cfg: cfg, log: log}
	s.srv = sdk.NewServer(&sdk.Implementation{Name: "soulstack-keeper", Title: "Soul Stack keeper", Version: cfg.Version}, &sdk.ServerOptions{
		Instructions: "Soul Stack's Operator API. Souls are managed hosts, providers are cloud accounts, profiles are VM specs; " +
			"a run executes a scenario (YAML steps calling modules on souls or on the keeper). " +
			"Check a scenario with scenario_validate, read modules with modules_list/module_show, start it with run_start and follow it with run_wait. " +
			"Refusals are tool errors whose text starts with a stable dotted code (auth.forbidden, mcp.writes_disabled, scenario.invalid…).",
	})
	s.addTools()
	return s
}

// Handler serves MCP over streamable HTTP. Every request is authenticated
// by the API's Guard (the bearer token, the failed-authentication budget,
// problem+json refusals), then by the SDK's bearer middleware, which ties
// an MCP session to the token that opened it.
func (s *Server) Handler() http.Handler {
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s.srv }, &sdk.StreamableHTTPOptions{
		Logger:         s.log,
		SessionTimeout: 30 * time.Minute,
	})
	bearer := sdkauth.RequireBearerToken(verifyGuarded, &sdkauth.RequireBearerTokenOptions{AllowMissingExpiration: true})
	inner := bearer(h)
	return s.cfg.API.Guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The tools see the request's header only: carry the client's
		// address there for the API's failed-authentication budget,
		// replacing whatever the client sent under that name.
		r.Header.Set(remoteAddrHeader, r.RemoteAddr)
		inner.ServeHTTP(w, r)
	}))
}

// remoteAddrHeader carries the MCP client's address to the tools.
const remoteAddrHeader = "X-Soulstack-Mcp-Remote-Addr"

// principalKey holds the principal in the SDK's TokenInfo.Extra.
const principalKey = "principal"

// verifyGuarded is the SDK's token verifier: the API's Guard has
// authenticated the request already; it hands the principal on.
func verifyGuarded(ctx context.Context, _ string, r *http.Request) (*sdkauth.TokenInfo, error) {
	p, ok := api.Caller(r.Context())
	if !ok {
		return nil, sdkauth.ErrInvalidToken
	}
	return &sdkauth.TokenInfo{UserID: p.TokenID, Extra: map[string]any{principalKey: p}}, nil
}

// toolError is a refusal or failure a tool reports: its text starts with
// the stable code.
type toolError struct {
	Code    string
	Message string
}

func (e *toolError) Error() string { return e.Code + ": " + e.Message }

// errorOf turns what a tool's call returned into the tool error the model
// reads: an API problem keeps its code, detail and located errors (already
// masked by the API).
func errorOf(err error) *toolError {
	var te *toolError
	if errors.As(err, &te) {
		return te
	}
	var p *client.Problem
	if errors.As(err, &p) {
		msg := p.Detail
		for _, e := range p.Errors {
			if e.Code != "" {
				msg += fmt.Sprintf("\n%s: %s: %s", e.Location, e.Code, e.Message)
				continue
			}
			msg += fmt.Sprintf("\n%s: %s", e.Location, e.Message)
		}
		return &toolError{Code: p.Code, Message: strings.TrimSpace(msg)}
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return &toolError{Code: "mcp.cancelled", Message: "the call was cancelled or timed out"}
	}
	return &toolError{Code: CodeInternal, Message: "the keeper could not complete the call; see its log"}
}

// call is what a tool's body gets: the caller and a client of the REST
// API acting with the caller's token.
type call struct {
	p   auth.Principal
	c   *client.Client
	req *sdk.CallToolRequest
}

// toolSpec declares one tool.
type toolSpec struct {
	name, title, description string
	// write marks a tool that changes something: refused unless
	// AllowWrites, and only for a token holding perm.
	write bool
	perm  auth.Permission
	// object names what the call is about in its audit event.
	object func(in any) string
}

// add registers a tool whose input is In and output Out; body does the
// work. The wrapper authenticates the caller from the session's request,
// enforces the write policy, audits the call and turns errors into tool
// errors.
func add[In, Out any](s *Server, spec toolSpec, body func(ctx context.Context, c call, in In) (*Out, error)) {
	in, out := schemaFor[In](), schemaFor[Out]()
	tool := &sdk.Tool{
		Name: spec.name, Title: spec.title, Description: spec.description,
		InputSchema: in, OutputSchema: out,
		Annotations: &sdk.ToolAnnotations{Title: spec.title, ReadOnlyHint: !spec.write, IdempotentHint: !spec.write, OpenWorldHint: new(bool)},
	}
	if spec.write {
		destructive := spec.name == "run_cancel"
		tool.Annotations.DestructiveHint = &destructive
	}
	resolved, err := in.Resolve(nil)
	if err != nil {
		panic(fmt.Sprintf("mcp: input schema of %s: %v", spec.name, err)) // a programmer error in a tool's types
	}
	// The tool's arguments are validated here rather than by the SDK, so
	// that a bad argument is a tool error with a dotted code like any
	// other (mcp.invalid_arguments).
	s.srv.AddTool(tool, func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		p, c, err := s.caller(req)
		if err != nil {
			return toolResult(nil, err) // no principal: nothing to audit against
		}
		var arg In
		err = decodeArguments(req.Params.Arguments, resolved, &arg)
		if err == nil {
			err = s.permitWrite(spec, p)
		}
		var res *Out
		if err == nil {
			res, err = body(ctx, call{p: p, c: c, req: req}, arg)
		}
		object := "mcp/" + spec.name
		if spec.object != nil {
			if o := spec.object(arg); o != "" {
				object = o
			}
		}
		s.audit(ctx, p, spec.name, object, err)
		return toolResult(res, err)
	})
}

// decodeArguments validates a call's arguments against the tool's input
// schema and decodes them into in; a refusal is mcp.invalid_arguments
// saying where.
func decodeArguments(raw json.RawMessage, schema *jsonschema.Resolved, in any) error {
	if len(raw) == 0 || string(raw) == "null" {
		raw = json.RawMessage("{}")
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return &toolError{Code: CodeInvalidArguments, Message: "arguments are not JSON: " + err.Error()}
	}
	if err := schema.Validate(v); err != nil {
		return &toolError{Code: CodeInvalidArguments, Message: "arguments: " + err.Error()}
	}
	if err := json.Unmarshal(raw, in); err != nil {
		return &toolError{Code: CodeInvalidArguments, Message: "arguments: " + err.Error()}
	}
	return nil
}

// toolResult is a call's answer: out as structured content (and its JSON
// as text, for clients that read only text), or the error as a tool error
// whose text starts with its dotted code.
func toolResult(out any, err error) (*sdk.CallToolResult, error) {
	if err != nil {
		var r sdk.CallToolResult
		r.SetError(errorOf(err))
		return &r, nil
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("encode the tool's answer: %w", err)
	}
	return &sdk.CallToolResult{StructuredContent: json.RawMessage(b), Content: []sdk.Content{&sdk.TextContent{Text: string(b)}}}, nil
}

// permitWrite refuses a write tool unless the keeper allows writes over
// MCP and the token holds the tool's permission (the API checks it again).
func (s *Server) permitWrite(spec toolSpec, p auth.Principal) error {
	if !spec.write {
		return nil
	}
	if !s.cfg.AllowWrites {
		return &toolError{Code: CodeWritesDisabled, Message: spec.name + " changes the keeper's state, and this keeper does not allow writes over MCP (keeper.yml: mcp: {allow_writes: true})"}
	}
	if err := p.Require(spec.perm); err != nil {
		return &toolError{Code: "auth.forbidden", Message: err.Error()}
	}
	return nil
}

// caller is the principal of the request that carried the tool call, and a
// client of the REST API with its token.
func (s *Server) caller(req *sdk.CallToolRequest) (auth.Principal, *client.Client, error) {
	var p auth.Principal
	ok := false
	if ti := req.Extra.TokenInfo; ti != nil {
		p, ok = ti.Extra[principalKey].(auth.Principal)
	}
	header := ""
	if req.Extra.Header != nil {
		header = req.Extra.Header.Get("Authorization")
	}
	token, found := strings.CutPrefix(header, "Bearer ")
	if !ok || !found {
		return p, nil, &toolError{Code: "auth.invalid_token", Message: "the call carries no authenticated bearer token"}
	}
	c, err := client.NewWithOptions("http://keeper.in-process", strings.TrimSpace(token), client.Options{
		Transport: inProcess{h: s.cfg.API, remoteAddr: req.Extra.Header.Get(remoteAddrHeader)},
	})
	if err != nil {
		return p, nil, err
	}
	return p, c, nil
}

// audit records one tool call: the tool, the outcome's code, never the
// arguments (they may hold secret input). A project's caller's call is
// its project's event, whatever object it named (another project's soul
// it was refused is not that project's to read); a keeper-wide caller's
// is the object's.
func (s *Server) audit(ctx context.Context, p auth.Principal, tool, object string, err error) {
	payload := map[string]any{"tool": tool, "ok": err == nil}
	if err != nil {
		payload["code"] = errorOf(err).Code
	}
	if aerr := s.cfg.Audit.AuditRecord(context.WithoutCancel(ctx), store.AuditParams{Actor: p.Actor(), Action: ActionCalled, Object: object, Payload: payload, Project: p.Project}); aerr != nil {
		s.log.Error("audit an MCP call", "tool", tool, "err", aerr)
	}
}
