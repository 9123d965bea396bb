package keeper

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/soulstack/soulstack/internal/base"

	"github.com/jonboulle/clockwork"
	"github.com/riverqueue/river"

	"github.com/soulstack/soulstack/internal/access"
	"github.com/soulstack/soulstack/internal/api"
	"github.com/soulstack/soulstack/internal/approval"
	"github.com/soulstack/soulstack/internal/audit"
	"github.com/soulstack/soulstack/internal/auth"
	"github.com/soulstack/soulstack/internal/bus"
	"github.com/soulstack/soulstack/internal/config"
	"github.com/soulstack/soulstack/internal/drift"
	"github.com/soulstack/soulstack/internal/engine"
	"github.com/soulstack/soulstack/internal/module"
	"github.com/soulstack/soulstack/internal/modules/cloud"
	"github.com/soulstack/soulstack/internal/modules/file"
	"github.com/soulstack/soulstack/internal/modules/pkg"
	"github.com/soulstack/soulstack/internal/notify"
	"github.com/soulstack/soulstack/internal/plugin"
	"github.com/soulstack/soulstack/internal/runner"
	"github.com/soulstack/soulstack/internal/secret"
	"github.com/soulstack/soulstack/internal/seeding"
	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/store/sqlstore"
	"github.com/soulstack/soulstack/internal/tracing"
	"github.com/soulstack/soulstack/internal/transport"
	"github.com/soulstack/soulstack/internal/transport/ssh"
	"github.com/soulstack/soulstack/internal/ui"
	"github.com/soulstack/soulstack/internal/version"
)

// The registry is every part's store: checked here, where it is handed
// to each.
var (
	_ runner.Store   = store.Store(nil)
	_ runner.Records = store.Store(nil)
	_ cloud.Registry = store.Store(nil)
	_ drift.Store    = store.Store(nil)
	_ seeding.Store  = store.Store(nil)
	_ access.Store   = store.Store(nil)
)

// System is one keeper: every part it is made of, each built once by New
// in the order the parts depend on each other, and the servers Serve runs.
// Nothing else in the keeper wires parts together; a part gets the narrow
// dependencies it declares when it is built here.
type System struct {
	Config config.Config
	// Base is the keeper's logger and its one clock, handed to every part
	// (base.Base): leases and heartbeats, step timeouts, token expiry,
	// presence, certificates, audit events all read Clock.
	base.Base
	// Secrets are the keeper's own secrets and the credentials it resolved
	// for projects: every channel it is handed to masks them (the log, API
	// and MCP answers, audit payloads, webhooks, plugin logs, runs' data).
	Secrets *secret.Keeper

	// Identity: this keeper's own stable id (a run's executor) and the
	// deployment's, shared by every keeper on the database (the ownership
	// tag drivers put on VMs).
	OwnerID      string
	DeploymentID string

	// Changes carries the store's committed changes to the parts that
	// react to them (the SSH pool, the agent bus).
	Changes *store.Changes
	// Store is the registry, sealing secret fields at rest and publishing
	// its changes to Changes.
	Store       *sqlstore.Store
	auditKey    *audit.Key
	checkpoints *audit.Checkpointer
	sealer      *secret.Sealer
	secrets     *projectSecrets
	approvals   approval.Policy // keeper.yml's approval policies (policy and policy_file)
	resolver    *secret.Resolver

	// Agent is the keeper's side of self-onboarding souls (CA, agent
	// listener); Bus is the agent transport's bus, nil when nats is off.
	Agent *agentSide
	Bus   *bus.Server

	// Plugins runs the cloud driver plugins; SSH is the connection pool
	// every run shares.
	Plugins *plugin.Host
	SSH     *ssh.Pool
	// Runs is the durable run queue with its engine.
	Runs *runner.Runner
	// runMetrics counts the runs' targets (built with the runner,
	// registered with the API's metrics).
	runMetrics *runner.Metrics
	Cloud      *cloudService
	// Access decides people's roles and authenticates tokens.
	Access *access.Service
	// Seeds runs souls' seeds; Drift checks that souls still carry them.
	Seeds *seeding.Service
	Drift *drift.Service
	// API is the Operator API; its HTTP server, the agent listener's and
	// the metrics server are below.
	API *api.Server
	// Notifier delivers keeper.yml's webhook notifications.
	Notifier *notify.Notifier

	ln        net.Listener // the Operator API's, TLS when configured
	scheme    string
	http      *http.Server
	agentHTTP *http.Server // nil when agent_listen is off
	stopMCP   func()

	// closers release what New built, run in reverse order by Close.
	closers []func()
}

// New builds a keeper from c: it opens and checks the registry, binds the
// listeners (so that a busy port fails a fresh keeper before it writes
// anything), creates the first admin token when there is none, and builds
// the CA, the bus, the plugins, the SSH pool, the runner, the Operator API
// and the MCP server. Nothing serves until Serve. On error, whatever was
// built is released.
func New(ctx context.Context, c config.Config, log *slog.Logger) (_ *System, err error) {
	secrets := secret.NewKeeper()
	s := &System{Config: c, Base: base.Base{Log: slog.New(secrets.LogHandler(log.Handler())), Clock: clockwork.NewRealClock()}, Secrets: secrets, Changes: &store.Changes{}}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	steps := []struct {
		name string
		run  func(context.Context) error
	}{
		{"registry", s.openRegistry},
		{"tracing", s.setupTracing},
		{"listen", s.listen},
		{"admin token", s.bootstrapAdmin},
		{"agent side", s.buildAgentSide},
		{"bus", s.buildBus},
		{"runs", s.buildRuns},
		{"api", s.buildAPI},
	}
	for _, step := range steps {
		if err := step.run(ctx); err != nil {
			return nil, err
		}
		s.Log.Debug("keeper part built", "part", step.name)
	}
	return s, nil
}

// setupTracing installs the OTLP exporter of keeper.yml's tracing
// section; Close flushes it, after the drain.
func (s *System) setupTracing(ctx context.Context) error {
	t := s.Config.Tracing
	shutdown, err := tracing.Setup(ctx, tracing.Config{Endpoint: strings.TrimRight(t.OTLPEndpoint, "/"), SampleRatio: t.SampleRatio,
		Service: "soulstack-keeper", Version: version.String(), Instance: s.OwnerID})
	if err != nil {
		return err
	}
	if t.OTLPEndpoint != "" {
		s.Log.Info("tracing", "otlp_endpoint", t.OTLPEndpoint)
	}
	s.onClose(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := shutdown(ctx); err != nil {
			s.Log.Warn("flush traces", "err", err)
		}
	})
	return nil
}

// onClose registers fn to run when the system is closed.
func (s *System) onClose(fn func()) { s.closers = append(s.closers, fn) }

// Close releases everything New built, in reverse order. Serve calls it
// when it returns; call it yourself only for a System that never served.
func (s *System) Close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	s.closers = nil
}

// openRegistry loads the audit and data keys and opens the registry with
// them: audit events hashed and checkpointed, secret fields sealed, changes
// published.
func (s *System) openRegistry(ctx context.Context) error {
	c := s.Config
	if err := os.MkdirAll(c.DataDir, 0o700); err != nil {
		return fmt.Errorf("create data dir: %w", err)
	}
	var err error
	if s.auditKey, err = auditKey(ctx, c, true); err != nil {
		return err
	}
	if s.OwnerID, err = loadOrCreateID(c.DataDir); err != nil {
		return err
	}
	s.checkpoints = newCheckpointer(c, s.OwnerID, s.auditKey, s.Base)
	key, err := dataKey(c, s.Secrets)
	if err != nil {
		return err
	}
	if s.sealer, err = secret.NewSealer(key); err != nil {
		return err
	}
	st, err := OpenStore(ctx, c, sqlstore.WithAuditKey(s.auditKey), sqlstore.WithAuditAppended(s.checkpoints.Appended),
		sqlstore.WithSealer(s.sealer), sqlstore.WithChanges(s.Changes), sqlstore.WithClock(s.Clock.Now), sqlstore.WithFollowUps(s.followUps),
		sqlstore.WithSecrets(s.Secrets))
	if err != nil {
		return err
	}
	s.Store = st
	s.onClose(func() { st.Close() })
	// Registered after the store's close, so it runs before it (and after
	// the runner's stop): the last checkpoint covers the events of runs
	// that stop late.
	s.onClose(func() {
		if err := s.checkpoints.Flush(); err != nil {
			s.Log.Error("write audit checkpoint on shutdown", "path", s.checkpoints.Path(), "err", err)
		}
	})
	if err := checkDataKey(ctx, st, s.sealer, c); err != nil {
		return err
	}
	if s.DeploymentID, err = st.DeploymentID(ctx); err != nil {
		return err
	}
	if s.resolver, err = secret.NewResolver(secret.ResolverOptions{VaultAddress: c.Vault.Address, VaultTokenRef: c.Vault.TokenRef, Secrets: s.Secrets}); err != nil {
		return err
	}
	backend := "sqlite " + c.SQLitePath()
	if c.DatabaseURL != "" {
		backend = "postgres"
	}
	s.Log.Info("registries ready", "database", backend)
	return nil
}

// listen binds the Operator API's listener, with TLS when configured and
// the per-client connection limit.
func (s *System) listen(context.Context) error {
	c := s.Config
	tcp, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", c.Listen, err)
	}
	s.onClose(func() { tcp.Close() })
	tlsCfg, err := serverTLS(c, s.Base)
	if err != nil {
		return err
	}
	s.ln, s.scheme = limitConns(tcp, c.HTTP.MaxConnsPerClient, s.Log), "http://"
	if tlsCfg != nil {
		s.ln, s.scheme = tls.NewListener(s.ln, tlsCfg), "https://"
	}
	s.http = &http.Server{
		TLSConfig:         tlsCfg,
		ReadHeaderTimeout: c.HTTP.ReadHeaderTimeout.Std(),
		ReadTimeout:       c.HTTP.ReadTimeout.Std(),
		IdleTimeout:       c.HTTP.IdleTimeout.Std(),
		// No WriteTimeout: it would cut event streams that last as long
		// as their run.
		ErrorLog: slog.NewLogLogger(s.Log.Handler(), slog.LevelWarn),
	}
	return nil
}

// bootstrapAdmin creates the first admin token when the registry has none
// and writes it to <data-dir>/admin.token (0600).
func (s *System) bootstrapAdmin(ctx context.Context) error {
	path := s.Config.AdminTokenPath()
	id, created, err := writeAdminToken(path, func(t store.APIToken) (bool, error) {
		created, err := s.Store.TokenBootstrap(ctx, store.TokenCreateParams{Token: t, Actor: store.ActorKeeper})
		if err != nil {
			return false, fmt.Errorf("create admin token: %w", err)
		}
		return created, nil
	})
	if err != nil || !created {
		return err
	}
	s.Log.Info("created the first admin API token", "id", id, "path", path)
	return nil
}

// buildAgentSide loads the keeper CA and binds the agent listener, before
// the plugins start, so that the local driver learns its port.
func (s *System) buildAgentSide(context.Context) error {
	a, err := newAgentSide(s.Config, s.Base)
	if err != nil {
		return err
	}
	s.Agent = a
	if a.ln != nil {
		s.onClose(func() { a.ln.Close() })
	}
	return nil
}

// buildBus starts the agent transport's bus when nats is on, and has it
// cut the session of a soul whose identity a change of this keeper ended.
func (s *System) buildBus(ctx context.Context) error {
	b, err := startBus(ctx, s.Config, s.Store, s.resolver, s.Secrets, s.Base)
	if err != nil || b == nil {
		return err
	}
	s.Bus = b
	s.onClose(func() { b.Close() })
	s.Agent.busURLs = agentBusURLs(s.Config, s.Agent, busPort(b), b.AgentURLs, s.Store)
	s.Changes.Subscribe(revokeOnChange(b))
	return nil
}

// buildRuns builds the PluginHost, the SSH pool, the engine with its
// keeper-side target, the runner, and the orphan finder.
func (s *System) buildRuns(ctx context.Context) error {
	c := s.Config
	sshKey, err := loadOrCreateSSHKey(c.DataDir)
	if err != nil {
		return err
	}
	s.Secrets.Register(string(sshKey))
	files := filepath.Join(c.DataDir, "files")
	if err := os.MkdirAll(files, 0o700); err != nil {
		return fmt.Errorf("create files dir: %w", err)
	}
	plugins, err := plugin.New(plugin.Config{PluginDir: c.PluginDir, PathLookup: c.PluginPathLookup, Secrets: s.Secrets,
		Env: keeperDirsEnv(c, append(s.Agent.hostPorts(), busPort(s.Bus))...), Base: s.Base}) // the host names its lines component=plugin
	if err != nil {
		return err
	}
	s.Plugins = plugins
	s.onClose(func() { plugins.Close() })
	// Connections outlive runs, closed when idle (ssh.idle_timeout), past
	// ssh.max_idle, or when their soul is deleted or destroyed through this
	// keeper (other keepers close theirs when idle). Each run re-checks a
	// warm connection's host key before its first use (ssh.Scope), or at
	// most every ssh.host_key_recheck.
	s.SSH = ssh.NewPool(ssh.Options{Base: s.Named("ssh"), IdleTimeout: c.SSH.IdleTimeout.Std(), MaxIdle: c.SSH.MaxIdle,
		Sleep: s.sleep, Executor: s.Agent.executor(c.SSH.Executor, s.Log), HostKeyRecheck: c.SSH.HostKeyRecheck.Std()})
	s.onClose(func() { s.SSH.Close() })
	s.Changes.Subscribe(dropOnGone(s.SSH))
	settings, err := newCloudSettings(c, s.Agent)
	if err != nil {
		return err
	}
	// What the keeper resolves, dials and runs for a project is that
	// project's: its credentials, its key_refs, its SSH key.
	s.secrets, err = newProjectSecrets(c, s.resolver, s.Secrets, s.Store, s.sealer, sshKey)
	if err != nil {
		return err
	}
	s.buildNotifier(c)
	provisioned, err := s.provisionModules(settings)
	if err != nil {
		return err
	}
	exec, err := s.executor(sshKey, files, provisioned)
	if err != nil {
		return err
	}
	s.runMetrics = runner.NewMetrics()
	for _, id := range module.IDs() {
		s.runMetrics.Known(string(id))
	}
	s.Runs, err = runner.New(ctx, runner.Config{
		Store: s.Store, DB: s.Store.DB(), Queue: s.Store.Queue(), Sealer: s.sealer, Secrets: s.Secrets, Exec: exec, Owner: s.OwnerID, Base: s.Base,
		Lease:   runner.Lease{Heartbeat: c.Runs.Heartbeat.Std(), StaleAfter: c.Runs.StaleAfter.Std()},
		Workers: c.Runs.Workers,
		Metrics: s.runMetrics,
		// The drift service is built after the runner and before it
		// starts: drift checks finish through it.
		Finished: s.runFinished,
		Follows:  s.followsRun,
		Periodic: s.periodic(c),
		Register: func(w *river.Workers) {
			river.AddWorker(w, s.Notifier.Worker())
			river.AddWorker(w, s.Notifier.EventWorker())
			river.AddWorker(w, driftChanged{s: s})
		},
	})
	if err != nil {
		return err
	}
	s.Cloud = &cloudService{st: s.Store, keeperID: s.DeploymentID, drivers: plugins.Driver, credentials: s.secrets.Provider}
	s.Seeds = seeding.New(s.Store, s.Runs, scenarioChecker(s.Store), s.Base)
	s.Drift = drift.New(drift.Config{Store: s.Store, Seeds: s.Seeds, Notify: s.Notifier.Send, Wants: s.Notifier.Wants, EnqueueTx: s.Runs.EnqueueTx, Base: s.Base})
	return nil
}

// provisionModules provisions the modules that need the keeper's
// services: the cloud states; core.file.present, which remembers the
// files runs wrote from secrets; the package states, which wait for a
// held lock on the keeper's clock.
func (s *System) provisionModules(settings *cloudSettings) (map[module.ID]module.Module, error) {
	provisioned, err := module.Provision(settings.services(s.Config, s.Store, s.DeploymentID, s.Plugins.Driver, s.secrets))
	if err != nil {
		return nil, err
	}
	fileMods, err := module.Provision(file.Services{SecretFiles: s.Store})
	if err != nil {
		return nil, err
	}
	maps.Copy(provisioned, fileMods)
	pkgMods, err := module.Provision(pkg.Services{Sleep: s.sleep})
	if err != nil {
		return nil, err
	}
	maps.Copy(provisioned, pkgMods)
	return provisioned, nil
}

// executor is the engine the runner executes runs with: the approval gate
// over keeper.yml's policies, the project's SSH keys and key_refs from
// projectSecrets, the provisioned modules.
func (s *System) executor(sshKey []byte, files string, provisioned map[module.ID]module.Module) (*engine.Executor, error) {
	c := s.Config
	policy, err := c.Approvals.Parsed()
	if err != nil {
		return nil, err
	}
	s.approvals = policy
	return &engine.Executor{
		Approvals: &approval.Gate{Store: s.Store, Config: policy, ExpiresIn: c.Approvals.ExpiresIn.Std(), Now: s.Clock.Now},
		Store:     s.Store,
		Load:      loadPlan,
		KeeperKey: sshKey,
		ProjectKey: func(ctx context.Context, project string) ([]byte, error) {
			k, err := s.secrets.SSHKey(ctx, project)
			return k.private, err
		},
		Resolve: func(ctx context.Context, project, ref string) ([]byte, error) {
			v, err := s.secrets.Resolve(ctx, project, ref)
			return append([]byte(v), '\n'), err
		},
		Dial:       s.dialer,
		FilesDir:   files,
		Base:       s.Base,
		Keeper:     engine.KeeperTarget{KeeperFiles: engine.KeeperFiles(files)},
		Modules:    provisioned,
		Authorizer: auth.Checker{Tokens: s.Store, Now: s.Clock.Now},
		Limits:     engine.OutputLimits{Target: c.Runs.MaxTargetOutputBytes, Run: c.Runs.MaxOutputBytes},
	}, nil
}

// oidcConfig is keeper.yml's oidc section for the API, its client secret
// resolved; nil when OIDC sign-in is off.
func (s *System) oidcConfig(ctx context.Context) (*api.OIDCConfig, error) {
	o := s.Config.OIDC
	if !o.Enabled() {
		return nil, nil
	}
	var secretText string
	if o.ClientSecretRef != "" {
		v, err := s.resolver.Resolve(ctx, o.ClientSecretRef)
		if err != nil {
			return nil, fmt.Errorf("oidc.client_secret_ref: %w", err)
		}
		s.Secrets.Register(v)
		secretText = v
	}
	return &api.OIDCConfig{Issuer: o.Issuer, ClientID: o.ClientID, ClientSecret: secretText, RedirectURL: o.RedirectURL, Scopes: o.Scopes,
		GroupsClaim: o.GroupsClaim, Roles: o.Roles, Projects: o.Projects, TokenTTL: o.TokenTTL.Std(), Seal: s.sealer.Seal, Open: s.sealer.Open}, nil
}

// buildAPI builds the Operator API with the web UI and MCP beside it on
// the API's server, and the agent API for the agent listener.
func (s *System) buildAPI(ctx context.Context) error {
	c := s.Config
	oidcCfg, err := s.oidcConfig(ctx)
	if err != nil {
		return err
	}
	guard := api.NewJoinGuard(s.Store, s.Base, c.HTTP.AuthFailureBurst, c.HTTP.AuthFailureInterval.Std())
	s.onClose(guard.Close) // its last summary, before the store closes
	join := s.Agent.joinConfig(c, guard)
	check := scenarioChecker(s.Store)
	s.Access = access.New(s.Store, oidcCfg.AccessRoles(), s.Base)
	s.API = api.New(api.Config{Stores: api.StoresOf(s.Store), Secrets: s.Secrets, Base: s.Base, Version: version.String(), Runs: s.Runs, Check: check, Cloud: s.Cloud,
		Seeds: s.Seeds, Drift: s.Drift, Access: s.Access,
		Collectors:  s.collectors(),
		VerifyAudit: AuditVerifier(s.Store, s.auditKey, c.AuditCheckpointDir, s.checkpoints), UI: ui.Handler(),
		AuthFailureBurst: c.HTTP.AuthFailureBurst, AuthFailureInterval: c.HTTP.AuthFailureInterval.Std(), Join: join, OIDC: oidcCfg,
		Approvals: approval.NewService(s.Store, s.approvals, c.Approvals.Policy), Seal: s.sealer.Seal,
		ProjectKey: func(ctx context.Context, project string) (string, error) {
			k, err := s.secrets.SSHKey(ctx, project)
			return k.authorized, err
		},
		References: api.References{VaultPrefix: c.Vault.ProjectVaultPrefix, EndpointAllowed: c.EndpointAllowed}})
	s.http.Handler, s.stopMCP = withMCP(s.API, s.Store, s.Secrets, c, s.Base)
	s.http.RegisterOnShutdown(s.stopMCP)
	if s.Agent.ln != nil {
		s.agentHTTP = s.Agent.server(c, api.NewAgent(api.Config{Stores: api.StoresOf(s.Store), Secrets: s.Secrets, Base: s.Base, Version: version.String(), Runs: s.Runs, Check: check, Seeds: s.Seeds, Access: s.Access, Join: join}), s.Log)
	}
	return nil
}

// Serve serves the keeper until ctx is cancelled, then drains the runs
// and shuts down gracefully; it closes the System when it returns. ready,
// if not nil, receives the listening address once requests are accepted.
func (s *System) Serve(ctx context.Context, ready chan<- net.Addr) error {
	defer s.Close()
	c := s.Config
	if err := startCheckpoints(ctx, s.Store, s.checkpoints, s.Log); err != nil {
		return err
	}
	stopWatch := watchAdminTokens(ctx, s.Store, s.Base)
	defer stopWatch()
	s.withdrawLapsedAccess(ctx)
	if err := s.Runs.Start(ctx); err != nil {
		return err
	}
	stopRuns := func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), c.DrainTimeout.Std())
		defer cancel()
		if err := s.Runs.Stop(stopCtx); err != nil {
			s.Log.Warn("stop runner", "err", err)
		}
	}
	defer stopRuns() // on every return; a no-op after the drain below
	errc := make(chan error, 3)
	go func() { errc <- s.http.Serve(s.ln) }()
	if s.agentHTTP != nil {
		s.Agent.serve(s.agentHTTP, c, s.Log, errc)
		defer s.agentHTTP.Close()
	}
	if c.MetricsListen != "" {
		msrv, err := serveMetrics(c, s.API, s.Log, errc)
		if err != nil {
			_ = s.http.Close()
			return err
		}
		defer msrv.Close()
	}
	latest, err := schemaLatest(c)
	if err != nil {
		return err
	}
	newer := watchSchema(ctx, s.Store, latest, s.Base)
	s.announce()
	if ready != nil {
		ready <- s.ln.Addr()
	}

	var stopped error // why the keeper stops, when it is not asked to
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	case stopped = <-newer:
		// A newer keeper migrated the database: this one claims no run
		// any more, finishes the steps in flight (the drain) and exits,
		// its runs handed back to the newer keepers.
		s.Log.Error("the database was migrated by a newer keeper; stopping", "code", sqlstore.CodeSchemaNewer, "err", stopped)
	}
	// Drain first, the API still answering: no run is claimed any more,
	// the steps in flight finish (up to drain_timeout) and their runs are
	// handed back to be resumed by the next keeper to start.
	s.Log.Info("shutting down: draining runs", "drain_timeout", c.DrainTimeout.String())
	stopRuns()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := s.http.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	s.Log.Info("stopped")
	return stopped
}

// withdrawLapsedAccess ends the person tokens whose role keeper.yml's oidc
// section, changed since the last start, no longer gives.
func (s *System) withdrawLapsedAccess(ctx context.Context) {
	if n, err := s.Access.WithdrawLapsed(ctx, "", store.ActorOIDC); err != nil {
		s.Log.Error("withdraw the access keeper.yml no longer gives", "revoked", n, "err", err)
	} else if n > 0 {
		s.Log.Info("withdrew the access keeper.yml no longer gives", "revoked", n)
	}
}

// announce logs where the keeper listens and writes it to
// <data_dir>/keeper.url: soulctl sends this data dir's admin token only to
// the keeper whose URL this file names (never to another keeper it is
// pointed at).
func (s *System) announce() {
	url := s.scheme + s.ln.Addr().String()
	s.Log.Info("keeper listening", "addr", url, "version", version.String())
	if err := os.WriteFile(filepath.Join(s.Config.DataDir, "keeper.url"), []byte(url+"\n"), 0o644); err != nil {
		s.Log.Warn("write keeper.url", "err", err)
	}
}

// dialer is the transport of one run: a soul's agent when it is connected
// to the bus, else SSH through the shared pool.
func (s *System) dialer(keys transport.HostKeys) transport.Dialer {
	d := s.SSH.Dialer(keys)
	if s.Bus != nil {
		d = transport.AgentFirst(s.Bus, d, s.Clock)
	}
	return d
}

// sleep waits d on the system's clock, or until ctx ends.
func (s *System) sleep(ctx context.Context, d time.Duration) error {
	t := s.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.Chan():
		return nil
	}
}

// dropOnGone closes the pooled connections of a soul that is gone.
func dropOnGone(pool *ssh.Pool) store.Subscriber {
	return func(_ context.Context, ch store.Change) {
		if g, ok := ch.(store.SoulGone); ok {
			pool.Drop(soulConnName(g.Soul))
		}
	}
}

// soulConnName names the pool's connections to soul so (ssh.Pool.Drop):
// user@host:port, as the engine dials it.
func soulConnName(so store.Soul) string {
	addr := so.Address
	if addr == "" {
		addr = so.PrimaryIP
	}
	port := so.Connection.Port
	if port == 0 {
		port = ssh.DefaultPort
	}
	return ssh.Target{Address: addr, Port: port, User: so.Connection.User}.String()
}

// rechecker is the part of the bus told of identity changes (*bus.Server).
type rechecker interface {
	Recheck(ctx context.Context, sids ...string) []string
}

// revokeOnChange has the bus recheck a soul whose identity a change ended
// — deleted, destroyed, its certificate replaced — so that its agent, or
// the session of the superseded certificate, is cut off before the
// mutating call returns instead of at the next revalidation sweep.
func revokeOnChange(b rechecker) store.Subscriber {
	return func(ctx context.Context, ch store.Change) {
		var sid string
		switch ch := ch.(type) {
		case store.SoulGone:
			sid = ch.Soul.SID
		case store.CertRenewed:
			sid = ch.SID
		default:
			return
		}
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		b.Recheck(ctx, sid)
	}
}

// periodic are the keeper's scheduled tasks: the drift sweep when
// keeper.yml's drift.every is set, and every 30 s the drift checks of the
// seeds with a schedule of their own that are due.
func (s *System) periodic(c config.Config) []runner.Periodic {
	tasks := []runner.Periodic{{Name: "drift-due", Every: 30 * time.Second, Run: func(ctx context.Context) error {
		return s.Drift.Due(ctx)
	}}}
	if c.Drift.Every == 0 {
		return tasks
	}
	jitter, _ := c.Drift.JitterFraction() // validated with the config
	return append(tasks, runner.Periodic{Name: "drift-sweep", Every: c.Drift.Every.Std(), Jitter: jitter, Run: func(ctx context.Context) error {
		return s.Drift.Sweep(ctx)
	}})
}
