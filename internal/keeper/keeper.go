// Package keeper is the daemon's composition root: New builds every part of
// a keeper once — the registry (SQLite or PostgreSQL) with its audit chain
// and sealing, the CA and agent listener, the agent bus, the driver
// plugins, the SSH pool, the engine and runner, the Operator API with MCP
// and the web UI — each with the narrow dependencies it declares, and
// subscribes the parts that react to registry changes (store.Change);
// Serve runs them until the context ends and shuts down gracefully. It is
// the one place where the parts meet (docs/architecture.md).
package keeper

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"

	"github.com/soulstack/soulstack/internal/api"
	"github.com/soulstack/soulstack/internal/auth"
	"github.com/soulstack/soulstack/internal/config"
	"github.com/soulstack/soulstack/internal/logctx"
	"github.com/soulstack/soulstack/internal/runner"
	"github.com/soulstack/soulstack/internal/secret"
	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/store/postgres"
	"github.com/soulstack/soulstack/internal/store/sqlite"
	"github.com/soulstack/soulstack/internal/store/sqlstore"
)

// NewLogger returns the keeper's logger on w: structured and masked.
func NewLogger(w io.Writer, c config.Config) *slog.Logger {
	level := new(slog.LevelVar)
	_ = level.UnmarshalText([]byte(c.Log.Level))
	return NewLoggerLevel(w, c, level)
}

// NewLoggerLevel is NewLogger at a level that can change while the
// keeper runs (SIGHUP reloads log.level).
func NewLoggerLevel(w io.Writer, c config.Config, level *slog.LevelVar) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler = slog.NewTextHandler(w, opts)
	if c.Log.Format == "json" {
		h = slog.NewJSONHandler(w, opts)
	}
	return slog.New(secret.NewLogHandler(logctx.Handler(h)))
}

// OpenStore opens and migrates the configured database, creating the data
// directory (mode 0700) for SQLite. Without sqlstore.WithAuditKey the
// store reads but refuses mutations.
func OpenStore(ctx context.Context, c config.Config, opts ...sqlstore.Option) (*sqlstore.Store, error) {
	if c.DatabaseURL != "" {
		return postgres.Open(ctx, c.DatabaseURL, opts...)
	}
	if err := os.MkdirAll(c.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	return sqlite.Open(ctx, c.SQLitePath(), opts...)
}

// Migrate applies the database's migrations, the registries' and the run
// queue's, and closes it: `keeper migrate`.
func Migrate(ctx context.Context, c config.Config) error {
	st, err := OpenStore(ctx, c)
	if err != nil {
		return err
	}
	defer st.Close()
	return runner.Migrate(ctx, st.Queue())
}

// Run builds the keeper (New) and serves it until ctx is cancelled
// (Serve). ready, if not nil, receives the listening address once requests
// are accepted.
func Run(ctx context.Context, c config.Config, log *slog.Logger, ready chan<- net.Addr) error {
	s, err := New(ctx, c, log)
	if err != nil {
		return err
	}
	return s.Serve(ctx, ready)
}

// serveMetrics serves the API's /metrics without a token on
// metrics_listen, plain HTTP; its serve error goes to errc.
func serveMetrics(c config.Config, h *api.Server, log *slog.Logger, errc chan<- error) (*http.Server, error) {
	ln, err := net.Listen("tcp", c.MetricsListen)
	if err != nil {
		return nil, fmt.Errorf("metrics_listen on %s: %w", c.MetricsListen, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h.MetricsHandler())
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: c.HTTP.ReadHeaderTimeout.Std(),
		ReadTimeout:       c.HTTP.ReadTimeout.Std(),
		IdleTimeout:       c.HTTP.IdleTimeout.Std(),
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("metrics: %w", err)
		}
	}()
	log.Info("metrics listening (no token needed here)", "addr", "http://"+ln.Addr().String()+"/metrics")
	if !config.IsLoopback(c.MetricsListen) {
		log.Warn("metrics_listen is not a loopback address: anyone who reaches it reads the metrics without a token", "metrics_listen", c.MetricsListen)
	}
	return srv, nil
}

// writeAdminToken makes a new admin token and has save store it; once save
// reports it stored the token, the token is in the file at path (0600). The
// token is written to a temporary file before it is stored, and renamed
// into place after, so that a crash never leaves a stored admin token
// nobody can read.
func writeAdminToken(path string, save func(store.APIToken) (bool, error)) (id string, saved bool, err error) {
	plain, id, hash, err := auth.NewToken()
	if err != nil {
		return "", false, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".admin.token-*")
	if err != nil {
		return "", false, fmt.Errorf("write admin token: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return "", false, fmt.Errorf("write admin token: %w", err)
	}
	if _, err := tmp.WriteString(plain + "\n"); err != nil {
		tmp.Close()
		return "", false, fmt.Errorf("write admin token: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return "", false, fmt.Errorf("write admin token: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return "", false, fmt.Errorf("write admin token: %w", err)
	}
	saved, err = save(store.APIToken{ID: id, Name: "admin", Role: "admin", Hash: hash})
	if err != nil || !saved {
		return id, false, err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return id, true, fmt.Errorf("write admin token to %s: %w", path, err)
	}
	return id, true, nil
}
