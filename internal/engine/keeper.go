package engine

import (
	"context"

	"github.com/soulstack/soulstack/internal/module"
)

// KeeperTarget is the target of keeper-side steps: it runs no commands;
// keeper-side modules get what they need (plugins, registries) when they
// are wired.
type KeeperTarget struct {
	KeeperFiles
}

var _ module.Target = KeeperTarget{}

// SID returns module.Keeper.
func (KeeperTarget) SID() string { return module.Keeper }

// Exec fails: keeper-side modules do not run commands.
func (KeeperTarget) Exec(context.Context, module.Command) (module.ExecResult, error) {
	return module.ExecResult{}, &module.Error{Code: "module.no_exec", Message: module.ErrNoExec.Error(), Err: module.ErrNoExec}
}
