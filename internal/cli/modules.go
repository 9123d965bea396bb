package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/soulstack/soulstack/client"
)

func (a *app) modulesCommand() *cobra.Command {
	return group("modules", "Browse the module catalog",
		a.modulesListCommand(),
		a.modulesShowCommand(),
	)
}

func (a *app) modulesListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the module states the keeper can run",
		Args:  cobra.NoArgs,
		RunE: a.action(func(cmd *cobra.Command, _ []string, p *printer) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			l, err := c.ModuleList(cmd.Context())
			if err != nil {
				return err
			}
			t := &table{header: []string{"ID", "SIDE", "IDEMPOTENT", "SUMMARY"}}
			for _, m := range l.Items {
				t.add(m.ID, m.Side, yesNo(m.Idempotent), m.Summary)
			}
			return p.print(l, t)
		}),
	}
}

func (a *app) modulesShowCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "show ID",
		Short: "Show a module's catalog page",
		Long: `Show a module's catalog page: requirements, the state with when it changes,
the params and output tables, an example and notes. ID is namespace.module.state,
for example core.command.ran.`,
		Args: exactArgs("ID"),
		RunE: a.action(func(cmd *cobra.Command, args []string, p *printer) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			m, err := c.ModuleGet(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return p.print(m, modulePage(*m))
		}),
	}
}

// modulePage is a module's catalog page as plain text for a terminal, in
// the shape of the catalog's pages: title and summary, requirements, the
// state with when it changes, params, example, output and notes.
type modulePage client.Module

func (m modulePage) render(w io.Writer) error {
	var b strings.Builder
	heading := func(s string) {
		fmt.Fprintf(&b, "\n%s\n%s\n", s, strings.Repeat("-", len(s)))
	}
	fmt.Fprintf(&b, "%s\n%s\n\n%s\n", m.ID, strings.Repeat("=", len(m.ID)), m.Summary)
	for _, para := range paragraphs(m.Description) {
		fmt.Fprintf(&b, "\n%s\n", para)
	}

	heading("Requirements")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	for _, r := range m.requirements() {
		fmt.Fprintf(tw, "  %s\t%s\n", r[0], r[1])
	}
	tw.Flush()

	heading("State")
	fmt.Fprintf(&b, "%s — %s\n", m.ID, m.Summary)
	fmt.Fprintf(&b, "\nChanges when:\n  %s\n", orNone(m.ChangesWhen))
	fmt.Fprintf(&b, "\nDoes not change when:\n  %s\n", orNone(m.UnchangedWhen))

	heading("Parameters")
	if len(m.Params) == 0 {
		b.WriteString("None.\n")
	} else {
		tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "PARAMETER\tTYPE\tREQUIRED / DEFAULT\tDESCRIPTION")
		for _, p := range m.Params {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", p.Name, paramType(p), requiredOrDefault(p), oneLine(paramDoc(p)))
		}
		tw.Flush()
	}
	for _, g := range m.Exclusive {
		fmt.Fprintf(&b, "\n%s\n", groupText(g))
	}

	if m.Example != "" {
		heading("Example")
		for _, line := range strings.Split(strings.TrimRight(m.Example, "\n"), "\n") {
			fmt.Fprintf(&b, "  %s\n", line)
		}
	}

	heading("Output")
	if len(m.Output) == 0 {
		b.WriteString("None.\n")
	} else {
		tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "FIELD\tTYPE\tDESCRIPTION")
		for _, f := range m.Output {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", f.Name, f.Type, oneLine(f.Doc))
		}
		tw.Flush()
	}

	if len(m.Notes) > 0 {
		heading("Notes")
		for _, n := range m.Notes {
			fmt.Fprintf(&b, "  * %s\n", n)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// requirements returns the label/value pairs of the requirements section.
func (m modulePage) requirements() [][2]string {
	root := "not required"
	if m.NeedsRoot {
		root = "required (sudo is used when the connecting user is not root)"
	}
	side := "soul-side: runs on the step's target souls"
	if m.Side == "keeper" {
		side = "keeper-side: runs inside the keeper; the step must say `on: keeper`"
	}
	idem := "yes: a repeat with the same params is safe"
	if !m.Idempotent {
		idem = "no: a repeat runs again; guard it with `when:` / `changed_when:`"
	}
	return [][2]string{{"Root", root}, {"Side", side}, {"Idempotent", idem}}
}

func paramType(p client.ModuleParam) string {
	t := p.Type
	if p.Elem != "" && p.Elem != "any" {
		t = fmt.Sprintf("%s<%s>", p.Type, p.Elem)
	}
	if p.Secret {
		t += ", secret"
	}
	return t
}

func requiredOrDefault(p client.ModuleParam) string {
	switch {
	case p.Required:
		return "required"
	case len(p.Default) > 0 && string(p.Default) != "null":
		return "default " + formatDefault(p.Default)
	case p.DefaultDoc != "":
		return "default: " + p.DefaultDoc
	}
	return "optional"
}

// formatDefault shows a string default as is and any other value as
// compact JSON.
func formatDefault(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	if c := compactJSON(raw); c != "" {
		return c
	}
	return string(raw)
}

func paramDoc(p client.ModuleParam) string {
	doc := p.Doc
	if len(p.Enum) > 0 {
		doc = strings.TrimSpace(doc + " One of: " + strings.Join(p.Enum, ", ") + ".")
	}
	return doc
}

func groupText(g client.ModuleGroup) string {
	names := strings.Join(g.Params, ", ")
	if g.Required {
		return "Exactly one of " + names + " is required."
	}
	return "Mutually exclusive: " + names + " (give at most one)."
}

func paragraphs(s string) []string {
	var out []string
	for _, p := range strings.Split(strings.TrimSpace(s), "\n\n") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func orNone(s string) string {
	if strings.TrimSpace(s) == "" {
		return "Not documented."
	}
	return s
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
