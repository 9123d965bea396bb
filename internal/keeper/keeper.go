// Package keeper wires the daemon together: configuration, the registry
// store (SQLite or PostgreSQL), the first admin token, the Operator API and
// the HTTP server with its graceful shutdown. It is the one place where the
// parts meet.
package keeper

import (
	"context"
	"crypto/tls"
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
	"github.com/soulstack/soulstack/internal/ui"
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

// Run serves the keeper until ctx is cancelled, then shuts down gracefully.
// ready, if not nil, receives the listening address once requests are
// accepted.
func Run(ctx context.Context, c config.Config, log *slog.Logger, ready chan<- net.Addr) error {
	if err := os.MkdirAll(c.DataDir, 0o700); err != nil {
		return fmt.Errorf("create data dir: %w", err)
	}
	akey, err := auditKey(ctx, c, true)
	if err != nil {
		return err
	}
	checkpoints, err := newCheckpointer(c, akey, log)
	if err != nil {
		return err
	}
	st, err := OpenStore(ctx, c, sqlstore.WithAuditKey(akey), sqlstore.WithAuditAppended(checkpoints.Appended))
	if err != nil {
		return err
	}
	defer st.Close()
	if err := checkDataKey(ctx, st, c); err != nil {
		return err
	}
	// Deferred before the runner's stop, so it runs after it: the last
	// checkpoint covers the events of runs that stop late.
	defer func() {
		if err := checkpoints.Flush(); err != nil {
			log.Error("write audit checkpoint on shutdown", "path", checkpoints.Path(), "err", err)
		}
	}()
	backend := "sqlite " + c.SQLitePath()
	if c.DatabaseURL != "" {
		backend = "postgres"
	}
	log.Info("registries ready", "database", backend)

	// Listen before anything is written, so that a busy port fails a
	// fresh keeper before it creates an admin token.
	tcp, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", c.Listen, err)
	}
	defer tcp.Close()
	tlsCfg, err := serverTLS(c, log, time.Now())
	if err != nil {
		return err
	}
	var ln net.Listener = limitConns(tcp, c.HTTP.MaxConnsPerClient, log)
	scheme := "http://"
	if tlsCfg != nil {
		ln, scheme = tls.NewListener(ln, tlsCfg), "https://"
	}
	if err := bootstrapAdmin(ctx, st, c, log); err != nil {
		return err
	}
	if err := startCheckpoints(ctx, st, checkpoints, log); err != nil {
		return err
	}
	stopWatch := watchAdminTokens(ctx, st, log)
	defer stopWatch()
	agent, err := newAgentSide(c, log, time.Now())
	if err != nil {
		return err
	}
	if agent.ln != nil {
		defer agent.ln.Close()
	}
	agents, err := startBus(ctx, c, st, log)
	if err != nil {
		return err
	}
	if agents != nil {
		defer agents.Close()
		agent.busURLs = agentBusURLs(c, agent, busPort(agents), agents.AgentURLs, st)
	}
	svc, err := newServices(ctx, st, c, agent, log, agents)
	if err != nil {
		return err
	}
	defer svc.plugins.Close()
	defer svc.ssh.Close()
	if err := svc.runs.Start(ctx); err != nil {
		return err
	}
	drainTimeout := config.Duration(c.DrainTimeout)
	stopRuns := func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), drainTimeout)
		defer cancel()
		if err := svc.runs.Stop(stopCtx); err != nil {
			log.Warn("stop runner", "err", err)
		}
	}
	defer stopRuns() // on every return; a no-op after the drain below
	join := agent.joinConfig(c)
	handler := api.New(api.Config{Store: svc.store, Logger: log, Version: version.String(), Runs: svc.runs, Check: scenarioChecker(st), Cloud: svc.cloud,
		VerifyAudit: AuditVerifier(st, akey, c.AuditCheckpointDir, checkpoints), UI: ui.Handler(),
		AuthFailureBurst: c.HTTP.AuthFailureBurst, AuthFailureInterval: config.Duration(c.HTTP.AuthFailureInterval), Join: join})
	withMCPHandler, stopMCP := withMCP(handler, svc.store, c, log)
	srv := &http.Server{
		Handler:           withMCPHandler,
		TLSConfig:         tlsCfg,
		ReadHeaderTimeout: config.Duration(c.HTTP.ReadHeaderTimeout),
		ReadTimeout:       config.Duration(c.HTTP.ReadTimeout),
		IdleTimeout:       config.Duration(c.HTTP.IdleTimeout),
		// No WriteTimeout: it would cut event streams that last as long
		// as their run.
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	srv.RegisterOnShutdown(stopMCP)
	errc := make(chan error, 3)
	go func() { errc <- srv.Serve(ln) }()
	if agent.ln != nil {
		asrv := agent.serve(c, api.NewAgent(api.Config{Store: svc.store, Logger: log, Version: version.String(), Runs: svc.runs, Check: scenarioChecker(st), Join: join}), log, errc)
		defer asrv.Close()
	}
	if c.MetricsListen != "" {
		msrv, err := serveMetrics(c, handler, log, errc)
		if err != nil {
			_ = srv.Close()
			return err
		}
		defer msrv.Close()
	}
	log.Info("keeper listening", "addr", scheme+ln.Addr().String(), "version", version.String())
	if ready != nil {
		ready <- ln.Addr()
	}

	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	// Drain first, the API still answering: no run is claimed any more,
	// the steps in flight finish (up to drain_timeout) and their runs are
	// handed back to be resumed by the next keeper to start.
	log.Info("shutting down: draining runs", "drain_timeout", c.DrainTimeout)
	stopRuns()
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
// and writes it to <data-dir>/admin.token (0600).
func bootstrapAdmin(ctx context.Context, st store.Store, c config.Config, log *slog.Logger) error {
	path := c.AdminTokenPath()
	id, created, err := writeAdminToken(path, func(t store.APIToken) (bool, error) {
		created, err := st.TokenBootstrap(ctx, store.TokenCreateParams{Token: t, Actor: store.ActorKeeper})
		if err != nil {
			return false, fmt.Errorf("create admin token: %w", err)
		}
		return created, nil
	})
	if err != nil || !created {
		return err
	}
	log.Info("created the first admin API token", "id", id, "path", path)
	return nil
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
		ReadHeaderTimeout: config.Duration(c.HTTP.ReadHeaderTimeout),
		ReadTimeout:       config.Duration(c.HTTP.ReadTimeout),
		IdleTimeout:       config.Duration(c.HTTP.IdleTimeout),
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
