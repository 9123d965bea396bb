package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/module"
	"github.com/soulstack/soulstack/internal/scenario"
)

// checkLocally validates the scenario and its input before the run is
// submitted, and reports every problem as "file:line:column: code:
// message" (exit ExitInvalid). Modules are checked against the keeper's
// own catalog (GET /v1/modules), so soulctl needs no module code and never
// disagrees with the keeper about which modules exist; when the catalog
// cannot be fetched only the scenario's syntax and structure are checked
// here, and the keeper checks the rest.
func (a *app) checkLocally(ctx context.Context, c *client.Client, in client.RunCreate) error {
	var err error
	if mods, lerr := c.ModuleList(ctx); lerr == nil {
		_, err = scenario.Load(in.File, []byte(in.Scenario), in.Input, scenario.WithModules(catalog(mods.Items)))
	} else {
		_, err = scenario.Parse(in.File, []byte(in.Scenario))
	}
	var se *scenario.Error
	if !errors.As(err, &se) {
		return nil
	}
	w := a.env.Stderr
	fmt.Fprintf(w, "error: scenario.invalid: %s has %d problem(s); nothing ran\n", in.File, len(se.Problems))
	for _, p := range se.Problems {
		fmt.Fprintln(w, p.String())
	}
	return &exitError{code: ExitInvalid}
}

// catalog looks modules up in the keeper's catalog.
func catalog(items []client.Module) func(module.ID) (module.Module, error) {
	byID := make(map[module.ID]module.Module, len(items))
	for _, m := range items {
		b, err := json.Marshal(m)
		if err != nil {
			continue
		}
		var info module.Info
		if json.Unmarshal(b, &info) == nil {
			byID[info.ID] = declared{info}
		}
	}
	return func(id module.ID) (module.Module, error) {
		m, ok := byID[id]
		if !ok {
			return nil, fmt.Errorf("%w: %s", module.ErrUnknown, id)
		}
		return m, nil
	}
}

// declared is a module known only by its declaration: enough to validate
// a scenario, never run.
type declared struct{ info module.Info }

func (d declared) Info() module.Info { return d.info }

func (d declared) Run(context.Context, module.RunInfo, json.RawMessage, module.Target) (module.Result, error) {
	return module.Result{}, module.NotImplemented(d.info.ID)
}
