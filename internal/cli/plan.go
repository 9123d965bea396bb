package cli

import (
	"fmt"
	"strings"

	"github.com/soulstack/soulstack/client"
)

// checkOptions are soulctl run's check flags.
type checkOptions struct {
	check, diff, exitCode bool
}

// ExitChangesPending: with --check --exit-code, an apply would change
// something (or might: a target is unknown).
const ExitChangesPending = 2

// planText renders a check run's answer as a plan, like terraform plan:
// per step and soul what would change (+ added, - removed, ~ changed),
// what is unknown and why, then the counts. diff adds files' unified
// diffs.
func planText(r *client.Run, diff bool) string {
	var b strings.Builder
	b.WriteString("\nCheck: nothing was changed. An apply would:\n")
	for _, st := range r.Steps {
		if st.Status == client.StepUnknown && len(st.Targets) == 0 {
			fmt.Fprintf(&b, "  ? %s: unknown (its targets come from an earlier step's result)\n", st.Name)
			continue
		}
		for _, t := range st.Targets {
			switch t.Status {
			case client.TargetWouldChange:
				fmt.Fprintf(&b, "  ~ %s on %s (%s)\n", st.Name, t.SID, st.Module)
				for _, c := range t.Changes {
					b.WriteString(changeLine(c, diff))
				}
			case client.TargetUnknown:
				fmt.Fprintf(&b, "  ? %s on %s (%s): unknown: %s\n", st.Name, t.SID, st.Module, t.Unknown)
				for _, c := range t.Changes {
					b.WriteString(changeLine(c, diff))
				}
			}
		}
	}
	c := r.Check
	if c == nil {
		c = &client.CheckSummary{}
	}
	if !c.Pending() {
		b.WriteString("  (nothing: every soul carries what the scenario asks)\n")
	}
	fmt.Fprintf(&b, "Plan: %d to change, %d unknown, %d unchanged, %d failed.\n", c.WouldChange, c.Unknown, c.Unchanged, c.Failed)
	return b.String()
}

// changeLine is one change of a plan, with its diff when asked.
func changeLine(c client.Change, diff bool) string {
	sign := "~"
	switch c.Action {
	case "create", "install", "add", "start", "pull", "run":
		sign = "+"
	case "delete", "remove", "purge", "destroy":
		sign = "-"
	}
	line := fmt.Sprintf("      %s %s %s %s", sign, c.Kind, c.Action, c.Name)
	if c.Before != "" || c.After != "" {
		line += fmt.Sprintf(" (%s → %s)", orNone(c.Before), orNone(c.After))
	}
	if c.Note != "" {
		line += " — " + c.Note
	}
	line += "\n"
	if diff && c.Diff != "" {
		for _, l := range strings.SplitAfter(strings.TrimRight(c.Diff, "\n"), "\n") {
			line += "        " + strings.TrimRight(l, "\n") + "\n"
		}
	}
	return line
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// checkExit is soulctl run --check --exit-code's exit: 0 nothing would
// change, 2 changes pending, 5 the check run failed (as any run).
func checkExit(r *client.Run) error {
	if r.Phase != client.PhaseSucceeded {
		msg := fmt.Sprintf("check run %s %s", r.ID, r.Phase)
		if r.Error != nil {
			msg += ": " + errorText(r.Error)
		}
		return &exitError{code: ExitRunFailed, msg: msg}
	}
	if r.Check != nil && r.Check.Pending() {
		return &exitError{code: ExitChangesPending}
	}
	return nil
}
