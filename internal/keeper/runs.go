package keeper

import (
	"fmt"
	"path/filepath"

	"github.com/soulstack/soulstack/internal/config"
	"github.com/soulstack/soulstack/internal/secret"
)

// dataKey returns the key that seals secrets at rest: from data_key_ref
// (env: or file:, base64) when configured — every keeper sharing one
// PostgreSQL needs the same key — else <data-dir>/data.key, created on
// first start (0600).
func dataKey(c config.Config, secrets *secret.Keeper) ([]byte, error) {
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
	secrets.Register(v)
	return secret.DecodeKey(v)
}
