package module

import (
	"context"
	"errors"
)

// ErrNoKeeperFiles is returned when a target gives no access to the
// keeper's files directory.
var ErrNoKeeperFiles = errors.New("this target cannot read files from the keeper")

// KeeperFiles is implemented by targets through which a module may read a
// file from the keeper's files directory (<data-dir>/files): the source of
// core.file.present and the path of core.script.ran. Names are relative to
// that directory and may not leave it. When a target does not implement
// it, such params fail with ErrNoKeeperFiles.
type KeeperFiles interface {
	ReadKeeperFile(ctx context.Context, name string) ([]byte, error)
}

// ReadKeeperFile reads name through t, or fails with ErrNoKeeperFiles.
func ReadKeeperFile(ctx context.Context, t Target, name string) ([]byte, error) {
	kf, ok := t.(KeeperFiles)
	if !ok {
		return nil, &Error{Code: "module.keeper_files_unavailable", Message: ErrNoKeeperFiles.Error(), Err: ErrNoKeeperFiles}
	}
	return kf.ReadKeeperFile(ctx, name)
}
