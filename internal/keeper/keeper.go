// Package keeper wires the daemon together: configuration, the registry
// store (SQLite or PostgreSQL), the first admin token, the Operator API and
// the HTTP server with its graceful shutdown. It is the one place where the
// parts meet.
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
	"time"

	"github.com/soulstack/soulstack/internal/api"
	"github.com/soulstack/soulstack/internal/auth"
	"github.com/soulstack/soulstack/internal/config"
	"github.com/soulstack/soulstack/internal/secret"
	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/store/postgres"
	"github.com/soulstack/soulstack/internal/store/sqlite"
	"github.com/soulstack/soulstack/internal/store/sqlstore"
	"github.com/soulstack/soulstack/internal/version"
)

// NewLogger returns the keeper's logger on w: structured and masked.
func NewLogger(w io.Writer, c config.Config) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.Log.Level))
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler = slog.NewTextHandler(w, opts)
	if c.Log.Format == "json" {
		h = slog.NewJSONHandler(w, opts)
	}
	return slog.New(secret.NewLogHandler(h))
}

// OpenStore opens and migrates the configured database, creating the data
// directory (mode 0700) for SQLite.
func OpenStore(ctx context.Context, c config.Config) (*sqlstore.Store, error) {
	if c.DatabaseURL != "" {
		return postgres.Open(ctx, c.DatabaseURL)
	}
	if err := os.MkdirAll(c.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	return sqlite.Open(ctx, c.SQLitePath())
}

// Run serves the keeper until ctx is cancelled, then shuts down gracefully.
// ready, if not nil, receives the listening address once requests are
// accepted.
func Run(ctx context.Context, c config.Config, log *slog.Logger, ready chan<- net.Addr) error {
	if err := os.MkdirAll(c.DataDir, 0o700); err != nil {
		return fmt.Errorf("create data dir: %w", err)
	}
	st, err := OpenStore(ctx, c)
	if err != nil {
		return err
	}
	defer st.Close()
	backend := "sqlite " + c.SQLitePath()
	if c.DatabaseURL != "" {
		backend = "postgres"
	}
	log.Info("registries ready", "database", backend)

	// Listen before anything is written, so that a busy port fails a
	// fresh keeper before it creates an admin token.
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", c.Listen, err)
	}
	defer ln.Close()
	if err := bootstrapAdmin(ctx, st, c, log); err != nil {
		return err
	}
	svc, err := newServices(ctx, st, c, log)
	if err != nil {
		return err
	}
	defer svc.plugins.Close()
	if err := svc.runs.Start(ctx); err != nil {
		return err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := svc.runs.Stop(stopCtx); err != nil {
			log.Warn("stop runner", "err", err)
		}
	}()
	srv := &http.Server{
		Handler:           api.New(api.Config{Store: svc.store, Logger: log, Version: version.String(), Runs: svc.runs, Check: scenarioChecker(st), Cloud: svc.cloud}),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("keeper listening", "addr", "http://"+ln.Addr().String(), "version", version.String())
	if ready != nil {
		ready <- ln.Addr()
	}

	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	log.Info("stopped")
	return nil
}

// bootstrapAdmin creates the first admin token when the registry has none
// and writes it to <data-dir>/admin.token (0600). The token is written to a
// temporary file before it is stored, and renamed into place after, so that
// a crash never leaves a stored admin token nobody can read.
func bootstrapAdmin(ctx context.Context, st store.Store, c config.Config, log *slog.Logger) error {
	plain, id, hash, err := auth.NewToken()
	if err != nil {
		return err
	}
	path := c.AdminTokenPath()
	tmp, err := os.CreateTemp(filepath.Dir(path), ".admin.token-*")
	if err != nil {
		return fmt.Errorf("write admin token: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("write admin token: %w", err)
	}
	if _, err := tmp.WriteString(plain + "\n"); err != nil {
		tmp.Close()
		return fmt.Errorf("write admin token: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write admin token: %w", err)
	}
	created, err := st.TokenBootstrap(ctx, store.TokenCreateParams{
		Token: store.APIToken{ID: id, Name: "admin", Role: "admin", Hash: hash},
		Actor: store.ActorKeeper,
	})
	if err != nil {
		return fmt.Errorf("create admin token: %w", err)
	}
	if !created {
		return nil
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write admin token to %s: %w", path, err)
	}
	log.Info("created the first admin API token", "id", id, "path", path)
	return nil
}
