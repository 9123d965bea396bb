package keeper

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/soulstack/soulstack/internal/auth"
	"github.com/soulstack/soulstack/internal/bus"
	"github.com/soulstack/soulstack/internal/config"
	"github.com/soulstack/soulstack/internal/engine"
	"github.com/soulstack/soulstack/internal/plugin"
	"github.com/soulstack/soulstack/internal/runner"
	"github.com/soulstack/soulstack/internal/secret"
	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/store/sqlstore"
	"github.com/soulstack/soulstack/internal/transport/ssh"
)

// services are what newServices wires beside the store: the run queue
// with its engine, the PluginHost and the orphan finder.
type services struct {
	// store is the registry with provider configs sealed at rest.
	store   store.Store
	runs    *runner.Runner
	plugins *plugin.Host
	cloud   *cloudService
	// ssh is the connection pool every run shares; closed after the
	// runner has stopped.
	ssh *ssh.Pool
}

// newServices wires the run queue and the engine (the data key that seals
// secret inputs, this keeper's stable id, its SSH key and files
// directory), the credentials resolver and the PluginHost. agents, when
// not nil, is the bus through which souls with a connected agent are
// reached.
func newServices(ctx context.Context, st *sqlstore.Store, c config.Config, agent *agentSide, log *slog.Logger, agents *bus.Server) (*services, error) {
	key, err := dataKey(c)
	if err != nil {
		return nil, err
	}
	sealer, err := secret.NewSealer(key)
	if err != nil {
		return nil, err
	}
	var reg store.Store = sealedStore{Store: st, sealer: sealer}
	if agents != nil {
		reg = revokingStore{Store: reg, bus: agents}
	}
	owner, err := loadOrCreateID(c.DataDir)
	if err != nil {
		return nil, err
	}
	// The deployment's id, shared by every keeper on this database: the
	// ownership tag drivers put on VMs (owner above is this keeper's own).
	keeperID, err := st.DeploymentID(ctx)
	if err != nil {
		return nil, err
	}
	sshKey, err := loadOrCreateSSHKey(c.DataDir)
	if err != nil {
		return nil, err
	}
	secret.Register(string(sshKey))
	files := filepath.Join(c.DataDir, "files")
	if err := os.MkdirAll(files, 0o700); err != nil {
		return nil, fmt.Errorf("create files dir: %w", err)
	}
	resolver, err := secret.NewResolver(secret.ResolverOptions{VaultAddress: c.Vault.Address, VaultTokenRef: c.Vault.TokenRef})
	if err != nil {
		return nil, err
	}
	resolve := func(ctx context.Context, ref string) ([]byte, error) {
		v, err := resolver.Resolve(ctx, ref)
		return []byte(v), err
	}
	// A provider's credentials are the keeper's own: masked everywhere,
	// the plugin's log included. A soul's key (resolve, in the engine) is
	// masked in the run that uses it.
	credentials := func(ctx context.Context, ref string) ([]byte, error) {
		v, err := resolver.Resolve(ctx, ref)
		if err == nil {
			secret.Register(v)
		}
		return []byte(v), err
	}
	plugins, err := plugin.New(plugin.Config{PluginDir: c.PluginDir, PathLookup: c.PluginPathLookup, Env: keeperDirsEnv(c, append(agent.hostPorts(), busPort(agents))...), Logger: log.With("component", "plugin")})
	if err != nil {
		return nil, err
	}
	// Connections outlive runs, closed when idle (ssh.idle_timeout), past
	// ssh.max_idle, or when their soul is deleted or destroyed through this
	// keeper (other keepers close theirs when idle). Each run re-checks a
	// warm connection's host key before its first use (ssh.Scope).
	pool := ssh.NewPool(ssh.Options{Logger: log.With("component", "ssh"), IdleTimeout: config.Duration(c.SSH.IdleTimeout), MaxIdle: c.SSH.MaxIdle})
	pooled := poolStore{Store: reg, pool: pool}
	keeperTarget, err := newKeeperTarget(c, pooled, keeperID, files, sshKey, agent, plugins.Driver, credentials)
	if err != nil {
		plugins.Close()
		pool.Close()
		return nil, err
	}
	exec := &engine.Executor{
		Store:     pooled,
		Load:      loadPlan,
		KeeperKey: sshKey,
		Resolve: func(ctx context.Context, ref string) ([]byte, error) {
			b, err := resolve(ctx, ref)
			return append(b, '\n'), err
		},
		SSH:        ssh.Options{Logger: log.With("component", "ssh")},
		SSHPool:    pool,
		FilesDir:   files,
		Logger:     log,
		Keeper:     keeperTarget,
		Authorizer: auth.Checker{Tokens: st},
	}
	if agents != nil {
		exec.Agents = agents
	}
	runs, err := runner.New(ctx, runner.Config{
		Store: reg, DB: st.DB(), Queue: st.Queue(), Sealer: sealer, Exec: exec, Owner: owner, Logger: log,
	})
	if err != nil {
		plugins.Close()
		pool.Close()
		return nil, err
	}
	return &services{store: pooled, ssh: pool, runs: runs, plugins: plugins, cloud: &cloudService{st: reg, keeperID: keeperID, drivers: plugins.Driver, resolve: credentials}}, nil
}

// poolStore closes a soul's pooled connections when the soul is deleted.
type poolStore struct {
	store.Store
	pool *ssh.Pool
}

// SoulDelete deletes the soul and closes the connections to it.
func (s poolStore) SoulDelete(ctx context.Context, p store.DeleteParams) error {
	so, gerr := s.Store.SoulGet(ctx, p.Key)
	if err := s.Store.SoulDelete(ctx, p); err != nil {
		return err
	}
	if gerr == nil {
		s.pool.Drop(engine.SoulConnName(so))
	}
	return nil
}

// dataKey returns the key that seals secrets at rest: from data_key_ref
// (env: or file:, base64) when configured — every keeper sharing one
// PostgreSQL needs the same key — else <data-dir>/data.key, created on
// first start (0600).
func dataKey(c config.Config) ([]byte, error) {
	if c.DataKeyRef == "" {
		return secret.LoadOrCreateKey(filepath.Join(c.DataDir, "data.key"))
	}
	ref, err := secret.ParseRef(c.DataKeyRef)
	if err != nil {
		return nil, fmt.Errorf("data_key_ref: %w", err)
	}
	v, err := ref.Resolve()
	if err != nil {
		return nil, fmt.Errorf("data_key_ref: %w", err)
	}
	secret.Register(v)
	return secret.DecodeKey(v)
}

// CloudDestroy records the destruction of VMs and closes the connections
// to the souls it marked destroyed.
func (s poolStore) CloudDestroy(ctx context.Context, p store.CloudDestroyParams) (store.CloudCascade, error) {
	var souls []store.Soul
	for _, sid := range p.SIDs {
		if so, err := s.Store.SoulGet(ctx, sid); err == nil {
			souls = append(souls, so)
		}
	}
	c, err := s.Store.CloudDestroy(ctx, p)
	if err != nil {
		return c, err
	}
	for _, so := range souls {
		if after, err := s.Store.SoulGet(ctx, so.SID); err != nil || after.Status == store.SoulDestroyed {
			s.pool.Drop(engine.SoulConnName(so))
		}
	}
	return c, nil
}
