package api

import (
	"context"
	"net/http"
	"runtime"
	"sync"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/auth"
	"github.com/soulstack/soulstack/internal/version"
)

// MetricsHandler serves the Prometheus metrics without checking a token:
// the keeper mounts it on metrics_listen. A scraper that asks for
// OpenMetrics gets it, with each request latency's exemplar: the trace id
// of a request that fell in the bucket, when tracing is on.
func (s *Server) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(s.metrics.registry, promhttp.HandlerOpts{EnableOpenMetrics: true})
}

// Health is the body of /healthz and /readyz.
type Health struct {
	Status string `json:"status" enum:"ok,unavailable"`
}

func (s *Server) registerHealth() {
	tags := []string{"health"}
	register(s, huma.Operation{
		OperationID: "healthz", Method: http.MethodGet, Path: "/healthz", Tags: tags,
		Summary:     "Liveness: the process serves requests",
		Description: "Answers 200 {\"status\": \"ok\"} while the keeper's HTTP server runs, without a token and without asking the database: for a supervisor's liveness probe.",
	}, "", true, func(context.Context, *struct{}) (*struct{ Body Health }, error) {
		return &struct{ Body Health }{Body: Health{Status: "ok"}}, nil
	})
	register(s, huma.Operation{
		OperationID: "readyz", Method: http.MethodGet, Path: "/readyz", Tags: tags,
		Summary: "Readiness: the database answers", Errors: []int{http.StatusServiceUnavailable},
		Description: "Answers 200 {\"status\": \"ok\"} when the keeper's database answered a ping (at most one a second), else 503 keeper.not_ready; " +
			"no token needed: for a load balancer's readiness check.",
	}, "", true, func(ctx context.Context, _ *struct{}) (*struct{ Body Health }, error) {
		if err := s.readiness.check(ctx, s.now(), s.auditStore.Ping); err != nil {
			s.log.Warn("not ready: database does not answer", "err", err)
			return nil, problem(http.StatusServiceUnavailable, "keeper.not_ready", "the database does not answer")
		}
		return &struct{ Body Health }{Body: Health{Status: "ok"}}, nil
	})

	register(s, huma.Operation{
		OperationID: "version", Method: http.MethodGet, Path: "/v1/version", Tags: tags,
		Summary:     "The keeper's version",
		Description: "The keeper's build version, its release and the Go it was built with (soulctl version shows it beside its own).",
	}, auth.Authenticated, false, func(context.Context, *struct{}) (*struct{ Body client.Version }, error) {
		return &struct{ Body client.Version }{Body: client.Version{Version: version.String(), Release: version.Release, Go: runtime.Version()}}, nil
	})

	prom := s.MetricsHandler()
	huma.Register(s.api, huma.Operation{
		OperationID: "metrics", Method: http.MethodGet, Path: "/metrics", Tags: tags,
		Summary: "Prometheus metrics (text exposition format)",
		Description: "Needs a token with `metrics.read`; keeper.yml's `metrics_listen` serves the same metrics " +
			"without a token on an address of its own.\n\nPermission: `metrics.read`.",
		Security:    []map[string][]string{{"bearer": {}}},
		Metadata:    map[string]any{"permission": string(auth.MetricsRead)},
		Middlewares: huma.Middlewares{s.authorize(auth.MetricsRead)},
		Errors:      []int{http.StatusUnauthorized, http.StatusForbidden, http.StatusTooManyRequests},
		Responses:   map[string]*huma.Response{"200": {Description: "Metrics", Content: map[string]*huma.MediaType{"text/plain": {}}}},
	}, func(context.Context, *struct{}) (*huma.StreamResponse, error) {
		return &huma.StreamResponse{Body: func(ctx huma.Context) {
			r, w := humago.Unwrap(ctx)
			prom.ServeHTTP(w, r)
		}}, nil
	})
}

// readiness answers /readyz from one database ping a second at most,
// however many ask: the route takes no token.
type readiness struct {
	mu   sync.Mutex
	at   time.Time
	err  error
	done bool
}

// readyFor is how long a ping's answer stands.
const readyFor = time.Second

func (r *readiness) check(ctx context.Context, now time.Time, ping func(context.Context) error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done && now.Sub(r.at) < readyFor && now.After(r.at.Add(-readyFor)) {
		return r.err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	r.at, r.err, r.done = now, ping(ctx), true
	return r.err
}
