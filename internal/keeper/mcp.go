package keeper

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/soulstack/soulstack/internal/base"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/api"
	"github.com/soulstack/soulstack/internal/config"
	"github.com/soulstack/soulstack/internal/mcp"
	"github.com/soulstack/soulstack/internal/secret"
	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/version"
)

// withMCP serves the Operator API with MCP at /mcp beside it: the MCP
// server's tools call h in process with the caller's token. stop ends the
// MCP requests still open (an MCP client's standing event stream, a
// run_wait): register it with the HTTP server's shutdown, which would
// otherwise wait for them.
func withMCP(h *api.Server, st store.Store, secrets *secret.Keeper, c config.Config, b base.Base) (handler http.Handler, stop func()) {
	m := mcp.New(mcp.Config{API: h, Check: scenarioChecker(st), Audit: st, Secrets: secrets, AllowWrites: c.MCP.AllowWrites, Version: version.String(), Base: b.Named("mcp")})
	stopping, stop := context.WithCancel(context.Background())
	inner := m.Handler()
	mux := http.NewServeMux()
	loopback := c.LoopbackListen()
	mux.Handle("/mcp", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if loopback && !loopbackRequest(r) {
			// DNS rebinding: a page of another site whose name resolves
			// to 127.0.0.1 reaches a loopback keeper with its own Host.
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusForbidden)
			_ = json.NewEncoder(w).Encode(client.Problem{Title: "Forbidden", Status: http.StatusForbidden, Code: "mcp.host_refused",
				Detail: "this keeper listens on loopback only: /mcp answers requests whose Host and Origin name a loopback address (localhost, 127.0.0.0/8, [::1])"})
			return
		}
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		defer context.AfterFunc(stopping, cancel)()
		inner.ServeHTTP(w, r.WithContext(ctx))
	}))
	mux.Handle("/", h)
	return mux, stop
}

// loopbackRequest reports whether r's Host, and its Origin when it has
// one, name a loopback address.
func loopbackRequest(r *http.Request) bool {
	if !loopbackHost(r.Host) {
		return false
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || !loopbackHost(u.Host) {
			return false
		}
	}
	return true
}

func loopbackHost(hostport string) bool {
	if _, _, err := net.SplitHostPort(hostport); err != nil { // a Host without a port
		hostport = net.JoinHostPort(strings.Trim(hostport, "[]"), "0")
	}
	return config.IsLoopback(hostport)
}
