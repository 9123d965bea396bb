package cli

import (
	"errors"
	"fmt"

	_ "github.com/soulstack/soulstack/internal/modules/standard" // the module catalog this soulctl knows
	"github.com/soulstack/soulstack/internal/scenario"
)

// checkLocally validates the scenario and its input before anything is
// sent, with the module catalog built into soulctl, and reports every
// problem as "file:line:column: code: message" (exit ExitInvalid). A
// keeper may know modules this soulctl does not: when the only problems
// are unknown modules, the keeper decides.
func (a *app) checkLocally(in runRequestData) error {
	_, err := scenario.Load(in.file, in.data, in.input)
	var se *scenario.Error
	if !errors.As(err, &se) {
		return nil
	}
	onlyUnknown := true
	for _, p := range se.Problems {
		onlyUnknown = onlyUnknown && p.Code == scenario.CodeUnknownModule
	}
	if onlyUnknown {
		return nil
	}
	w := a.env.Stderr
	fmt.Fprintf(w, "error: scenario.invalid: %s has %d problem(s); nothing ran\n", in.file, len(se.Problems))
	for _, p := range se.Problems {
		fmt.Fprintln(w, p.String())
	}
	return &exitError{code: ExitInvalid}
}

// runRequestData is what checkLocally needs of a run request.
type runRequestData struct {
	file  string
	data  []byte
	input map[string]any
}
