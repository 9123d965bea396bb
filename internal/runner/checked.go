package runner

import (
	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/auth"
)

// Checker parses and validates a scenario with its input before a run is
// accepted, reporting every problem with file:line:column. Literal
// targets must be souls of project (any soul when it is empty).
type Checker func(project, file, text string, input map[string]any) (Checked, []client.ProblemError)

// Checked is what checking a scenario tells whoever accepts its run.
type Checked struct {
	Name string
	// Input is the input with declared defaults applied.
	Input map[string]any
	// Secret names inputs declared secret.
	Secret map[string]bool
	// Needs lists the steps whose module declares a permission the run's
	// creator must hold besides run.create (the keeper-side cloud states).
	Needs []StepPermission
}

// StepPermission is one step's need for a permission.
type StepPermission struct {
	Step       string
	Module     string
	Permission auth.Permission
}
