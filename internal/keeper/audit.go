package keeper

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/soulstack/soulstack/internal/base"

	"github.com/soulstack/soulstack/internal/audit"
	"github.com/soulstack/soulstack/internal/config"
	"github.com/soulstack/soulstack/internal/secret"
	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/store/sqlstore"
)

// auditKey derives the audit key from its root: the key audit_key_ref
// names (env:, file: or vault:, base64, resolved now), else the data key.
// With create false a missing <data-dir>/data.key is an error rather than
// made: `keeper audit verify` must not invent a key that verifies nothing.
func auditKey(ctx context.Context, c config.Config, create bool) (*audit.Key, error) {
	var root []byte
	switch {
	case c.AuditKeyRef != "":
		r, err := secret.NewResolver(secret.ResolverOptions{VaultAddress: c.Vault.Address, VaultTokenRef: c.Vault.TokenRef})
		if err != nil {
			return nil, fmt.Errorf("audit_key_ref: %w", err)
		}
		v, err := r.Resolve(ctx, c.AuditKeyRef)
		if err != nil {
			return nil, fmt.Errorf("audit_key_ref: %w", err)
		}
		if root, err = secret.DecodeKey(v); err != nil {
			return nil, fmt.Errorf("audit_key_ref: %w", err)
		}
	case c.DataKeyRef == "" && !create:
		path := filepath.Join(c.DataDir, "data.key")
		b, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("no audit key: %s does not exist (point --data-dir at the keeper's data directory, or set data_key_ref or audit_key_ref)", path)
		}
		if err != nil {
			return nil, fmt.Errorf("read data key: %w", err)
		}
		if root, err = secret.DecodeKey(string(b)); err != nil {
			return nil, err
		}
	default:
		var err error
		if root, err = dataKey(c, nil); err != nil {
			return nil, err
		}
	}
	return audit.DeriveKey(root)
}

// newCheckpointer returns the audit checkpointer of keeper keeperID, which
// writes <audit_checkpoint_dir>/<keeper id>.checkpoint.json.
func newCheckpointer(c config.Config, keeperID string, key *audit.Key, b base.Base) *audit.Checkpointer {
	return audit.NewCheckpointer(audit.CheckpointerConfig{
		Dir: c.AuditCheckpointDir, KeeperID: keeperID, Key: key,
		Every: int64(c.AuditCheckpointEvery), Base: b.Named("audit"),
	})
}

// startCheckpoints compares the log with this keeper's last checkpoint and
// writes a fresh one. A log that contradicts the checkpoint (rows removed
// or rewritten while the keeper was down) is logged as an error and the
// old checkpoint is kept as the evidence; the keeper still serves.
func startCheckpoints(ctx context.Context, st *sqlstore.Store, cp *audit.Checkpointer, log *slog.Logger) error {
	head, err := st.AuditHead(ctx)
	if err != nil {
		return err
	}
	p, err := cp.Start(head, func(seq int64) (string, error) { return rowHash(ctx, st, seq) })
	if err != nil {
		return err
	}
	if p != nil {
		log.Error("the audit log contradicts this keeper's signed checkpoint; the checkpoint is kept as evidence and not updated until it is moved aside; run `keeper audit verify`",
			"code", p.Kind, "seq", p.Seq, "problem", p.Message, "checkpoint", cp.Path())
	}
	return nil
}

// rowHash returns the hash of the audit row at seq, "" when there is none.
func rowHash(ctx context.Context, st *sqlstore.Store, seq int64) (string, error) {
	evs, err := st.AuditList(ctx, store.AuditListParams{AfterSeq: seq - 1, Limit: 1})
	if err != nil {
		return "", err
	}
	if len(evs) == 0 || evs[0].Seq != seq {
		return "", nil
	}
	return evs[0].Hash, nil
}

// AuditVerifier returns the function that verifies the audit log in st
// against key and every signed checkpoint in the checkpoint directory and,
// when live is not nil, the last head the running keeper committed.
func AuditVerifier(st audit.Scanner, key *audit.Key, checkpointDir string, live *audit.Checkpointer) func(context.Context) (audit.Report, error) {
	return func(ctx context.Context) (audit.Report, error) {
		cps, err := audit.ReadCheckpoints(checkpointDir, key)
		if err != nil {
			return audit.Report{}, err
		}
		restores, err := audit.ReadRestores(checkpointDir, key)
		if err != nil {
			return audit.Report{}, err
		}
		if live != nil {
			if f, ok := live.Live(); ok {
				cps = append(cps, f)
			}
		}
		return audit.VerifyRestored(ctx, st, key, cps, restores)
	}
}

// VerifyAudit verifies the audit log of the database c names, as `keeper
// audit verify` does: with the audit key from c and the checkpoints in c's
// checkpoint directory.
func VerifyAudit(ctx context.Context, c config.Config) (audit.Report, error) {
	key, err := auditKey(ctx, c, false)
	if err != nil {
		return audit.Report{}, err
	}
	st, err := OpenStore(ctx, c)
	if err != nil {
		return audit.Report{}, err
	}
	defer st.Close()
	return AuditVerifier(st, key, c.AuditCheckpointDir, nil)(ctx)
}

// openStoreKeyed opens the configured database as OpenStore does, with the
// audit key of the keeper that serves it, for a command run on the host
// that writes registry changes (keeper token bootstrap): its audit events
// join the keyed chain like the serving keeper's own. The key must exist
// already; it is never made here.
func openStoreKeyed(ctx context.Context, c config.Config) (*sqlstore.Store, error) {
	key, err := auditKey(ctx, c, false)
	if err != nil {
		return nil, err
	}
	return OpenStore(ctx, c, sqlstore.WithAuditKey(key))
}
