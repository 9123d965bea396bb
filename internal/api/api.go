// Package api serves the keeper's Operator REST API with huma v2: routes,
// authentication and RBAC, request validation, masking of every response
// body, Prometheus metrics and the generated OpenAPI document.
package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/soulstack/soulstack/internal/base"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/access"
	"github.com/soulstack/soulstack/internal/approval"
	"github.com/soulstack/soulstack/internal/audit"
	"github.com/soulstack/soulstack/internal/auth"
	"github.com/soulstack/soulstack/internal/drift"
	"github.com/soulstack/soulstack/internal/runner"
	"github.com/soulstack/soulstack/internal/secret"
	"github.com/soulstack/soulstack/internal/seeding"
	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/tracing"
)

// MaxBodyBytes is the largest request body accepted (1 MiB).
const MaxBodyBytes = 1 << 20

// Config is what the API needs from the keeper.
type Config struct {
	// Stores are the parts of the registry the routes read and write.
	Stores Stores
	// Secrets are the keeper's secrets, masked in every answer (besides
	// secret-looking keys and token patterns); nil: none.
	Secrets *secret.Keeper
	// Base is the API's logger and clock.
	base.Base
	Version string
	// Runs and Check enable the run routes; without them the keeper
	// serves the registries only.
	Runs  RunService
	Check runner.Checker
	// Cloud enables the orphan routes.
	Cloud CloudService
	// Seeds runs souls' seeds (on join, on request); nil: neither.
	Seeds *seeding.Service
	// Drift enables the drift routes and the drift gauge.
	Drift *drift.Service
	// Collectors are more metrics served beside the API's own (the
	// keeper's counts of committed changes).
	Collectors []prometheus.Collector
	// AuthFailureBurst failed authentications in a row from one client
	// address, then one more per AuthFailureInterval; over that the API
	// answers 429 auth.rate_limited. Zero: 10 and 1 s.
	AuthFailureBurst    int
	AuthFailureInterval time.Duration
	// VerifyAudit verifies the audit log with the audit key and the signed
	// checkpoints (GET /v1/audit?verify=true); nil: verification fails.
	VerifyAudit func(context.Context) (audit.Report, error)
	// UI, when set, is the web UI, served at /ui/ (internal/ui). It signs
	// in through POST /v1/session and then calls the API with the cookie.
	UI http.Handler
	// Join enables POST /v1/join, /v1/join/renew and the soul binary's
	// download (join.go); nil: the keeper serves none of them.
	Join *JoinConfig
	// Access decides people's roles and authenticates tokens; required.
	Access *access.Service
	// OIDC enables sign-in with an OpenID Connect provider (oidc.go).
	OIDC *OIDCConfig
	// Approvals decides on held steps and keeps the API's approval
	// policy beside keeper.yml's; nil: the approval routes are off, and a
	// destroy outside a run is refused (the policies cannot be asked).
	Approvals *approval.Service
	// References says which credentials references a caller may write
	// and which provider endpoints keeper.yml allows; the zero value lets
	// keeper admins write any reference and no provider name an endpoint.
	References References
	// Seal seals a credential's value with the data key (Sealer.Seal);
	// nil: the credentials routes are off.
	Seal func([]byte) string
	// ProjectKey returns a project's keeper SSH public key (its
	// authorized_keys line); nil: GET /v1/projects/{name}/ssh-key is off.
	ProjectKey func(ctx context.Context, project string) (string, error)
}

// References is keeper.yml's say over the references and endpoints
// objects may name (the keeper checks both again where it resolves them).
type References struct {
	// VaultPrefix is the Vault path a project's vault: references must
	// lie under when a project's token writes them; "" allows a project's
	// token none.
	VaultPrefix func(project string) string
	// EndpointAllowed reports whether providers of driver may name
	// endpoint in their config.
	EndpointAllowed func(driver, endpoint string) bool
}

// Server is the Operator API as an http.Handler.
type Server struct {
	oidc         *oidcFlow // nil: no OIDC sign-in
	registry     RegistryStore
	soulStore    SoulStore
	runStore     RunStore
	tokenStore   TokenStore
	projectStore ProjectStore
	auditStore   AuditStore
	log          *slog.Logger
	now          func() time.Time
	secrets      *secret.Keeper
	authn        *auth.Authenticator
	access       *access.Service
	mux          *http.ServeMux
	api          huma.API
	metrics      *metrics
	runs         RunService
	check        runner.Checker
	cloud        CloudService
	seeds        *seeding.Service
	drift        *drift.Service
	limiter      *authLimiter
	audit        func(context.Context) (audit.Report, error) // Config.VerifyAudit
	// keyConflicts limits re-run key conflicts per token.
	keyConflicts *keyConflicts
	// readiness caches /readyz's database ping.
	readiness  *readiness
	join       *joinState // Config.Join
	approvals  *approval.Service
	refs       References
	seal       func([]byte) string
	projectKey func(ctx context.Context, project string) (string, error)
}

// New builds the API over cfg.Stores.
func New(cfg Config) *Server {
	s := newServer(cfg, false)
	s.eventSchemas() // the run vocabulary, documented even without the run routes
	s.registerHealth()
	s.registerProviders()
	s.registerProfiles()
	s.registerSouls()
	s.registerSeeds()
	s.registerSeedApply()
	s.registerTokens()
	s.registerProjects()
	s.registerBindings()
	s.registerCredentials()
	registerShares(s, "provider", auth.ProviderCreate, s.registry.ProviderGet, providerOwner, providerWire)
	registerShares(s, "profile", auth.ProfileCreate, s.registry.ProfileGet, profileOwner, profileWire)
	s.registerAudit()
	s.registerRuns()
	s.registerDrift()
	s.registerDeliveries()
	s.registerCloudDrift()
	s.registerCloud()
	s.registerModules()
	s.registerJoin()
	s.registerSession()
	s.registerOIDC()
	s.problemSchemas()
	s.mux.HandleFunc("GET "+ResourceMetadataPath, serveResourceMetadata)
	s.mux.HandleFunc("GET "+ResourceMetadataPath+"/mcp", serveResourceMetadata)
	if cfg.UI != nil {
		s.mux.Handle("GET /ui/", cfg.UI)
		s.mux.Handle("GET /ui", http.RedirectHandler("/ui/", http.StatusMovedPermanently))
		s.mux.Handle("GET /{$}", http.RedirectHandler("/ui/", http.StatusFound))
	}
	return s
}

// NewAgent builds the agent listener's API: only the join routes and the
// soul binary's download (cfg.Join must be set); no OpenAPI document,
// docs, health or metrics routes.
func NewAgent(cfg Config) *Server {
	s := newServer(cfg, true)
	s.registerJoin()
	return s
}

func newServer(cfg Config, agent bool) *Server {
	cfg.Init()
	if cfg.AuthFailureBurst <= 0 {
		cfg.AuthFailureBurst = 10
	}
	if cfg.AuthFailureInterval <= 0 {
		cfg.AuthFailureInterval = time.Second
	}
	s := &Server{
		registry:     cfg.Stores.Registry,
		soulStore:    cfg.Stores.Souls,
		runStore:     cfg.Stores.Runs,
		tokenStore:   cfg.Stores.Tokens,
		projectStore: cfg.Stores.Projects,
		auditStore:   cfg.Stores.Audit,
		log:          cfg.Log,
		now:          cfg.Clock.Now,
		secrets:      cfg.Secrets,
		authn:        cfg.Access.Authenticator(),
		access:       cfg.Access,
		mux:          http.NewServeMux(),
		runs:         cfg.Runs,
		check:        cfg.Check,
		cloud:        cfg.Cloud,
		seeds:        cfg.Seeds,
		drift:        cfg.Drift,
		approvals:    cfg.Approvals,
		refs:         cfg.References,
		seal:         cfg.Seal,
		projectKey:   cfg.ProjectKey,
		limiter:      newAuthLimiter(cfg.AuthFailureBurst, cfg.AuthFailureInterval, cfg.Clock.Now),
		audit:        cfg.VerifyAudit,
		oidc:         newOIDCFlow(cfg.OIDC),

		keyConflicts: newKeyConflicts(),
		readiness:    &readiness{},
	}
	if j := cfg.Join; j != nil {
		g := j.Guard
		if g == nil {
			g = NewJoinGuard(cfg.Stores.Audit, cfg.Base, 0, 0)
		}
		s.join = &joinState{cfg: *j, guard: g}
	}
	hc := huma.DefaultConfig("Soul Stack keeper — Operator API", cfg.Version)
	hc.CreateHooks = nil // no $schema links in bodies
	hc.Info.Description = "Registries (providers, profiles, souls, API tokens) and the hash-chained audit log. " +
		"Errors are RFC 9457 problems with a stable dotted code."
	hc.Info.Contact = &huma.Contact{Name: "Soul Stack"}
	hc.Tags = apiTags
	hc.Components.SecuritySchemes = map[string]*huma.SecurityScheme{
		"bearer": {Type: "http", Scheme: "bearer", Description: "An API token: Authorization: Bearer sst_…"},
		"session": {Type: "apiKey", In: "cookie", Name: SessionCookie, Description: "The web UI's session id (POST /v1/session; " +
			SecureSessionCookie + " over TLS). It opens nothing without session_key."},
		"session_key": {Type: "apiKey", In: "header", Name: CSRFHeader, Description: "The web UI session's key (csrf in the answer of POST /v1/session), " +
			"sent with the session cookie on every request; state-changing requests also need an Origin header naming the keeper (403 auth.csrf_failed)."},
	}
	// Relative to wherever the keeper is reached.
	hc.Servers = []*huma.Server{{URL: "/", Description: "This keeper"}}
	hc.Transformers = append(hc.Transformers, frameworkErrors, location, s.maskTransformer)
	if agent {
		hc.OpenAPIPath, hc.DocsPath, hc.SchemasPath = "", "", ""
	}
	s.api = humago.New(s.mux, hc)
	s.metrics = newMetrics()
	if s.drift != nil {
		s.metrics.registry.MustRegister(s.drift.Collector())
	}
	s.metrics.registry.MustRegister(cfg.Collectors...)
	s.api.UseMiddleware(s.observe)
	return s
}

// ServeHTTP serves the API; unknown routes get a problem document. No
// answer is ever sniffed into another type (a page of another origin
// cannot run a JSON answer as a script).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if _, pattern := s.mux.Handler(r); pattern == "" {
		if allow := s.allowed(r); len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			s.writeProblem(w, problem(http.StatusMethodNotAllowed, "route.method_not_allowed",
				fmt.Sprintf("%s is not a method of %s; it takes %s", r.Method, r.URL.Path, strings.Join(allow, ", "))))
			return
		}
		s.writeProblem(w, problem(http.StatusNotFound, "route.not_found", "no route "+r.Method+" "+r.URL.Path))
		return
	}
	s.mux.ServeHTTP(w, r)
}

// allowed lists the methods the path of r has a route for (r's own
// having none): a 405's Allow.
func (s *Server) allowed(r *http.Request) []string {
	var out []string
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		other := *r
		other.Method = m
		if _, pattern := s.mux.Handler(&other); pattern != "" {
			out = append(out, m)
		}
	}
	return out
}

// location sets the Location of a 201 to where the new object is, when
// its type says (client types' Path).
func location(ctx huma.Context, status string, v any) (any, error) {
	if l, ok := v.(interface{ Path() string }); ok && status == "201" {
		ctx.SetHeader("Location", l.Path())
	}
	return v, nil
}

// OpenAPI returns the generated OpenAPI document.
func (s *Server) OpenAPI() *huma.OpenAPI { return s.api.OpenAPI() }

// maskProblem returns a copy of p with the keeper's secrets and token
// patterns masked in its messages.
func (s *Server) maskProblem(p *client.Problem) *client.Problem {
	out := *p
	out.Detail = s.secrets.MaskString(p.Detail)
	out.Errors = make([]client.ProblemError, len(p.Errors))
	for i, e := range p.Errors {
		out.Errors[i] = client.ProblemError{Location: e.Location, Code: e.Code, Message: s.secrets.MaskString(e.Message)}
	}
	return &out
}

func (s *Server) writeProblem(w http.ResponseWriter, p *client.Problem) {
	b, _ := json.Marshal(s.maskProblem(p))
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(p.Status)
	_, _ = w.Write(append(b, '\n'))
}

type principalKey struct{}

// principal returns the authenticated caller of a handler.
func principal(ctx context.Context) auth.Principal {
	p, _ := ctx.Value(principalKey{}).(auth.Principal)
	return p
}

// register adds an operation that needs perm (auth.Authenticated: any valid
// token; pass public=true for none). The handler returns domain errors;
// they become problems here.
func register[I, O any](s *Server, op huma.Operation, perm auth.Permission, public bool, h func(context.Context, *I) (*O, error)) {
	op.MaxBodyBytes = MaxBodyBytes
	if op.Metadata == nil {
		op.Metadata = map[string]any{}
	}
	if public {
		op.Security = []map[string][]string{{}} // explicitly none: [{}]
	} else {
		op.Security = []map[string][]string{{"bearer": {}}, {"session": {}, "session_key": {}}}
		op.Metadata["permission"] = string(perm)
		if perm != auth.Authenticated {
			op.Description += "\n\nPermission: `" + string(perm) + "`."
		}
		op.Middlewares = append(op.Middlewares, s.authorize(perm))
		op.Errors = append(op.Errors, http.StatusUnauthorized, http.StatusForbidden, http.StatusTooManyRequests)
	}
	// The operation's answers of its usual status counted from zero: a
	// rate of them is defined before its first request.
	status := op.DefaultStatus
	if status == 0 {
		status = http.StatusOK
	}
	s.metrics.requests.WithLabelValues(op.OperationID, op.Method, strconv.Itoa(status))
	huma.Register(s.api, op, func(ctx context.Context, in *I) (*O, error) {
		out, err := h(ctx, in)
		if err != nil {
			p, known := problemFor(err)
			if !known || p.Status >= 500 {
				s.log.Error("request failed", "operation", op.OperationID, "err", err)
			}
			if h := headersFor(err); h != nil {
				return nil, huma.ErrorWithHeaders(p, h)
			}
			return nil, p
		}
		return out, nil
	})
}

// authorize authenticates the bearer token (or the web UI's session
// cookie, with its cross-site checks: session.go) and checks perm.
func (s *Server) authorize(perm auth.Permission) func(huma.Context, func(huma.Context)) {
	return func(ctx huma.Context, next func(huma.Context)) {
		p, session, prob := s.permitRequest(ctx.Context(), hostOf(ctx.RemoteAddr()), ctx.Header("Authorization"),
			func(name string) (*http.Cookie, error) { return huma.ReadCookie(ctx, name) }, ctx.Header(CSRFHeader), perm)
		if prob == nil && session != "" && !safeMethod(ctx.Method()) {
			if err := checkOrigin(ctx); err != nil {
				prob, _ = problemFor(err)
			}
		}
		if prob != nil {
			s.writeHumaProblem(ctx, prob)
			return
		}
		next(huma.WithValue(huma.WithValue(ctx, principalKey{}, p), sessionKey{}, session))
	}
}

// permitRequest authenticates a request by its Authorization header, or
// else by its session cookie with the session's key, and checks perm; it
// returns the session id when the cookie authenticated it.
func (s *Server) permitRequest(ctx context.Context, host, header string, cookie func(string) (*http.Cookie, error), key string, perm auth.Permission) (auth.Principal, string, *client.Problem) {
	if header == "" {
		if id := sessionCookieValue(cookie); id != "" {
			p, prob := s.permitSession(ctx, id, key, perm)
			return p, id, prob
		}
	}
	p, prob := s.permit(ctx, host, header, perm)
	return p, "", prob
}

// permit authenticates an Authorization header and checks perm: the
// principal, or the problem (401, 403) that refuses it. Routes check it
// before their handler; a long answer (an event stream) checks it again
// while it lasts.
func (s *Server) permit(ctx context.Context, host, header string, perm auth.Permission) (auth.Principal, *client.Problem) {
	// A client address over its failed-authentication budget may still
	// use a token this keeper has verified before, and nothing else: a
	// guesser learns nothing and the registry is spared the lookups.
	authenticate := s.authn.Authenticate
	limited, first := s.limiter.check(host)
	if limited {
		authenticate = s.authn.AuthenticateKnown
	}
	p, err := authenticate(ctx, header)
	if err != nil && limited {
		if first {
			s.auditRateLimited(ctx, host)
		}
		err = &rateLimitedError{host: host, retryAfter: s.limiter.interval}
	} else if errors.Is(err, auth.ErrInvalidToken) {
		s.limiter.fail(host)
	}
	return s.granted(p, err, perm, "authentication failed")
}

// granted is the outcome of an authentication: the problem of its error
// (logged as what when it is not one of the known refusals), else p when
// it holds perm.
func (s *Server) granted(p auth.Principal, err error, perm auth.Permission, what string) (auth.Principal, *client.Problem) {
	if err != nil {
		prob, known := problemFor(err)
		if !known {
			s.log.Error(what, "err", err)
		}
		return p, prob
	}
	if err := p.Require(perm); err != nil {
		prob, _ := problemFor(err)
		return p, prob
	}
	return p, nil
}

func (s *Server) writeHumaProblem(ctx huma.Context, p *client.Problem) {
	switch p.Status {
	case http.StatusUnauthorized:
		ctx.SetHeader("WWW-Authenticate", wwwAuthenticate(ownOrigin(ctx)))
	case http.StatusTooManyRequests:
		ctx.SetHeader("Retry-After", retryAfterSeconds(s.limiter.interval))
	}
	b, _ := json.Marshal(s.maskProblem(p))
	ctx.SetHeader("Content-Type", "application/problem+json")
	ctx.SetStatus(p.Status)
	_, _ = ctx.BodyWriter().Write(append(b, '\n'))
}

// maskTransformer passes every response body through secret.Mask, except
// the one response whose secret is meant for the caller (a new token). The
// masked body is returned already encoded (secret.MarshalMasked: the same
// bytes as encoding secret.Mask's result, in a fraction of the time), and
// the JSON format writes it as it is.
func (s *Server) maskTransformer(_ huma.Context, _ string, v any) (any, error) {
	if _, reveal := v.(interface{ RevealsSecret() }); reveal {
		return v, nil
	}
	if p, ok := v.(*client.Problem); ok {
		return s.maskProblem(p), nil
	}
	if v == nil {
		return nil, nil
	}
	b, err := s.secrets.MarshalMasked(v)
	if err != nil {
		return nil, err
	}
	return json.RawMessage(b), nil
}

// page computes the next cursor: a handler fetches limit+1 items; if it got
// more than limit, the cursor is the key of the last item returned.
func page[T any](items []T, limit int, key func(T) string) ([]T, string) {
	if len(items) <= limit {
		return items, ""
	}
	items = items[:limit]
	return items, key(items[len(items)-1])
}

// pageOf pages a whole list that is sorted by key: the items after
// in.After, at most in.Limit of them, and the cursor of the next page
// ("" on the last). For lists the keeper holds whole (the catalog, a
// project's bindings, a soul's seeds, the drivers' orphans).
func pageOf[T any](items []T, in *ListInput, key func(T) string) ([]T, string) {
	if in.After != "" {
		items = items[sort.Search(len(items), func(i int) bool { return key(items[i]) > in.After }):]
	}
	return page(items, in.Limit, key)
}

// listPage runs a list route: it fetches one item more than asked to know
// whether a next page exists, and converts the page to its wire form.
func listPage[R, W any](ctx context.Context, in *ListInput, list func(context.Context, store.ListParams) ([]R, error), key func(R) string, wire func(context.Context, R) W) ([]W, string, error) {
	rs, err := list(ctx, listScope(ctx, in))
	if err != nil {
		return nil, "", err
	}
	rs, next := page(rs, in.Limit, key)
	out := make([]W, 0, len(rs))
	for _, r := range rs {
		out = append(out, wire(ctx, r))
	}
	return out, next, nil
}

// ListInput is the query of every list route.
type ListInput struct {
	Limit int    `query:"limit" minimum:"1" maximum:"1000" default:"100" doc:"At most this many items."`
	After string `query:"after" doc:"Cursor: the next value of the previous page."`
}

// metrics are the keeper's HTTP metrics.
type metrics struct {
	registry *prometheus.Registry
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newMetrics() *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soulstack_http_requests_total", Help: "Operator API requests by operation and status.",
		}, []string{"operation", "method", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "soulstack_http_request_duration_seconds", Help: "Operator API request latency.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"operation", "method"}),
	}
	m.registry.MustRegister(m.requests, m.duration, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// observe records metrics and a debug log line for every operation.
func (s *Server) observe(ctx huma.Context, next func(huma.Context)) {
	start := time.Now()
	op := ctx.Operation()
	// A server span per request, named by the route (never its ids): a
	// run created here continues its trace in the queue and the engine.
	sctx, span := tracing.Tracer().Start(ctx.Context(), op.Method+" "+op.Path, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("http.request.method", op.Method), attribute.String("http.route", op.Path)))
	ctx = huma.WithContext(ctx, sctx)
	next(ctx)
	status := ctx.Status()
	if status == 0 {
		status = http.StatusOK
	}
	span.SetAttributes(attribute.Int("http.response.status_code", status))
	if status >= 500 {
		span.SetStatus(codes.Error, http.StatusText(status))
	}
	span.End()
	elapsed := time.Since(start)
	s.metrics.requests.WithLabelValues(op.OperationID, op.Method, strconv.Itoa(status)).Inc()
	obs := s.metrics.duration.WithLabelValues(op.OperationID, op.Method)
	if sc := span.SpanContext(); sc.IsSampled() {
		// The exemplar ties a slow bucket to a trace to look at.
		obs.(prometheus.ExemplarObserver).ObserveWithExemplar(elapsed.Seconds(), prometheus.Labels{"trace_id": sc.TraceID().String()})
	} else {
		obs.Observe(elapsed.Seconds())
	}
	level := slog.LevelDebug
	if status >= 500 {
		level = slog.LevelError
	}
	s.log.Log(ctx.Context(), level, "request", "method", op.Method, "path", ctx.URL().Path, "status", status, "duration", elapsed)
}

// apiTags are the groups of the API's operations, as the OpenAPI
// document lists them.
var apiTags = []*huma.Tag{
	{Name: "runs", Description: "Runs of scenarios: start (apply or check), list, read, follow as an event stream, cancel, and their outputs."},
	{Name: "approvals", Description: "Steps an approval policy holds: the policy, and approving or rejecting a held step."},
	{Name: "souls", Description: "Souls, the managed hosts: register, read, delete, and their seeds (the scenarios each should carry)."},
	{Name: "drift", Description: "Whether souls still carry their seeds, and whether the clouds still hold what the registry says: reports, checks, acknowledgements."},
	{Name: "providers", Description: "Cloud providers: a driver with its account, region and configuration, shared with projects."},
	{Name: "profiles", Description: "VM profiles: a provider's VM spec under a name, shared with projects."},
	{Name: "cloud", Description: "What the clouds hold beyond the registry: VMs a keeper made that no soul owns (orphans)."},
	{Name: "projects", Description: "Projects: their role bindings for people from the identity provider, quotas and secrets (credentials)."},
	{Name: "tokens", Description: "API tokens: issue, list and revoke."},
	{Name: "session", Description: "Sessions of the web UI and sign-in with the identity provider (OIDC), and who a token is."},
	{Name: "audit", Description: "The hash-chained audit log: read and verify."},
	{Name: "modules", Description: "The module catalog: every module state's parameters, output, example and notes."},
	{Name: "notifications", Description: "Webhook notifications: what was sent and what is still to be delivered."},
	{Name: "join", Description: "Self-onboarding: a VM exchanges its one-time bootstrap token for its identity."},
	{Name: "health", Description: "Liveness, readiness and the keeper's version."},
}
