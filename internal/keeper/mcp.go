package keeper

import (
	"log/slog"
	"net/http"

	"github.com/soulstack/soulstack/internal/api"
	"github.com/soulstack/soulstack/internal/config"
	"github.com/soulstack/soulstack/internal/mcp"
	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/version"
)

// withMCP serves the Operator API with MCP at /mcp beside it: the MCP
// server's tools call h in process with the caller's token.
func withMCP(h *api.Server, st store.Store, c config.Config, log *slog.Logger) http.Handler {
	m := mcp.New(mcp.Config{API: h, Check: scenarioChecker(st), Audit: st, AllowWrites: c.MCP.AllowWrites, Version: version.String(), Logger: log.With("component", "mcp")})
	mux := http.NewServeMux()
	mux.Handle("/mcp", m.Handler())
	mux.Handle("/", h)
	return mux
}
