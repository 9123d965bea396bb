package keeper

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/soulstack/soulstack/internal/config"
	"github.com/soulstack/soulstack/internal/engine"
	"github.com/soulstack/soulstack/internal/runner"
	"github.com/soulstack/soulstack/internal/secret"
	"github.com/soulstack/soulstack/internal/store/sqlstore"
	"github.com/soulstack/soulstack/internal/transport/ssh"
)

// newRunner wires the run queue and the engine: the data key that seals
// secret inputs, this keeper's stable id, its SSH key and files directory.
func newRunner(ctx context.Context, st *sqlstore.Store, c config.Config, log *slog.Logger) (*runner.Runner, error) {
	key, err := dataKey(c)
	if err != nil {
		return nil, err
	}
	sealer, err := secret.NewSealer(key)
	if err != nil {
		return nil, err
	}
	owner, err := loadOrCreateID(c.DataDir)
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
	exec := &engine.Executor{
		Store:     st,
		Load:      loadPlan,
		KeeperKey: sshKey,
		SSH:       ssh.Options{Logger: log.With("component", "ssh")},
		FilesDir:  files,
		Logger:    log,
		Keeper:    engine.KeeperTarget{KeeperFiles: engine.KeeperFiles(files)},
	}
	return runner.New(ctx, runner.Config{
		Store: st, DB: st.DB(), Queue: st.Queue(), Sealer: sealer, Exec: exec, Owner: owner, Logger: log,
	})
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
	return secret.DecodeKey(v)
}
