package keeper

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/soulstack/soulstack/internal/api"
	"github.com/soulstack/soulstack/internal/config"
	"github.com/soulstack/soulstack/internal/mcp"
	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/version"
)

// withMCP serves the Operator API with MCP at /mcp beside it: the MCP
// server's tools call h in process with the caller's token. stop ends the
// MCP requests still open (an MCP client's standing event stream, a
// run_wait): register it with the HTTP server's shutdown, which would
// otherwise wait for them.
func withMCP(h *api.Server, st store.Store, c config.Config, log *slog.Logger) (handler http.Handler, stop func()) {
	m := mcp.New(mcp.Config{API: h, Check: scenarioChecker(st), Audit: st, AllowWrites: c.MCP.AllowWrites, Version: version.String(), Logger: log.With("component", "mcp")})
	stopping, stop := context.WithCancel(context.Background())
	inner := m.Handler()
	mux := http.NewServeMux()
	mux.Handle("/mcp", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		defer context.AfterFunc(stopping, cancel)()
		inner.ServeHTTP(w, r.WithContext(ctx))
	}))
	mux.Handle("/", h)
	return mux, stop
}
