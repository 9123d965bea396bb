package keeper

import (
	"context"
	"errors"
	"fmt"

	"github.com/soulstack/soulstack/internal/config"
	"github.com/soulstack/soulstack/internal/secret"
	"github.com/soulstack/soulstack/internal/store"
)

// ErrDataKeyMismatch: the keeper's data key cannot open what other keepers
// sealed in the database it was pointed at. Keepers sharing one database
// must share data_key_ref (and audit_key_ref, or neither).
var ErrDataKeyMismatch = errors.New("keeper.data_key_mismatch")

// dataKeyCheckRuns is how many of the newest runs checkDataKey tries.
const dataKeyCheckRuns = 5

// runLister is the registry read the data key check makes.
type runLister interface {
	RunList(ctx context.Context, p store.RunListParams) ([]store.Run, error)
}

// checkDataKey refuses, before the keeper writes anything (an admin token,
// an audit checkpoint, a claim), a database whose newest runs' sealed
// inputs its data key opens none of: such a keeper would fail every run it
// claims (run.state_unreadable) and append audit rows under another audit
// key, breaking the chain the other keepers write. A database without runs
// passes.
func checkDataKey(ctx context.Context, st runLister, sealer *secret.Sealer, c config.Config) error {
	runs, err := st.RunList(ctx, store.RunListParams{ListParams: store.ListParams{Limit: dataKeyCheckRuns}})
	if err != nil {
		return fmt.Errorf("check the data key: %w", err)
	}
	tried := 0
	for _, r := range runs {
		if r.InputSealed == "" {
			continue
		}
		if _, err := sealer.Open(r.InputSealed); err == nil {
			return nil
		}
		tried++
	}
	if tried == 0 {
		return nil
	}
	from := "data_key_ref " + c.DataKeyRef
	if c.DataKeyRef == "" {
		from = "<data_dir>/data.key (no data_key_ref)"
	}
	return fmt.Errorf("%w: the data key from %s opens none of the %d newest runs in this database, which other keepers sealed with another key; keepers sharing one database must share data_key_ref (and audit_key_ref); nothing was written", ErrDataKeyMismatch, from, tried)
}
