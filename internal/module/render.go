package module

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
)

// RenderMarkdown renders info as a catalog page in Markdown, in the shape
// of the catalog's module pages: title and summary, requirements, the
// state with when it changes, the params and output tables, an example
// and notes.
func RenderMarkdown(info Info) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\n", info.ID)
	fmt.Fprintf(&b, "%s\n", info.Summary)
	for _, para := range paragraphs(info.Description) {
		fmt.Fprintf(&b, "\n%s\n", para)
	}

	b.WriteString("\n## Requirements\n\n")
	for _, r := range requirements(info) {
		fmt.Fprintf(&b, "- **%s**: %s\n", r[0], r[1])
	}

	b.WriteString("\n## State\n\n")
	fmt.Fprintf(&b, "`%s` — %s\n", info.ID, info.Summary)
	b.WriteString("\n### Changes when\n\n")
	fmt.Fprintf(&b, "%s\n", orNone(info.ChangesWhen))
	b.WriteString("\n### Does not change when\n\n")
	fmt.Fprintf(&b, "%s\n", orNone(info.UnchangedWhen))
	b.WriteString("\n### In a check run\n\n")
	fmt.Fprintf(&b, "%s\n", checkMode(info))

	b.WriteString("\n## Parameters\n\n")
	if len(info.Params) == 0 {
		b.WriteString("None.\n")
	} else {
		b.WriteString("| Parameter | Type | Required / default | Description |\n")
		b.WriteString("|---|---|---|---|\n")
		for _, p := range info.Params {
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", p.Name, cell(paramType(p)), cell(requiredOrDefault(p, "`")), cell(paramDoc(p)))
		}
	}
	for _, g := range info.Exclusive {
		fmt.Fprintf(&b, "\n%s\n", groupText(g, "`"))
	}

	if info.Example != "" {
		b.WriteString("\n## Example\n\n```yaml\n")
		b.WriteString(strings.TrimRight(info.Example, "\n"))
		b.WriteString("\n```\n")
	}

	b.WriteString("\n## Output\n\n")
	if len(info.Output) == 0 {
		b.WriteString("None.\n")
	} else {
		b.WriteString("| Field | Type | Description |\n")
		b.WriteString("|---|---|---|\n")
		for _, f := range info.Output {
			fmt.Fprintf(&b, "| `%s` | %s | %s |\n", f.Name, cell(f.Type), cell(f.Doc))
		}
	}

	if len(info.Notes) > 0 {
		b.WriteString("\n## Notes\n\n")
		for _, n := range info.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	return b.String()
}

// RenderText renders info as the same catalog page in plain text for a
// terminal, with aligned tables.
func RenderText(info Info) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n%s\n\n%s\n", info.ID, strings.Repeat("=", len(info.ID)), info.Summary)
	for _, para := range paragraphs(info.Description) {
		fmt.Fprintf(&b, "\n%s\n", para)
	}
	textHeading(&b, "Requirements")
	textRequirements(&b, info)
	textHeading(&b, "State")
	textState(&b, info, "-")
	return b.String()
}

// RenderFamilyText renders the catalog page of a module family (core.cloud):
// its summary and description, the requirements its states share, then
// each state with when it changes, its params, example, output and notes.
func RenderFamilyText(f Family, states []Info) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n%s\n\n%s\n", f.Name, strings.Repeat("=", len(f.Name)), f.Summary)
	for _, para := range paragraphs(f.Description) {
		fmt.Fprintf(&b, "\n%s\n", para)
	}
	if len(states) > 0 {
		textHeading(&b, "Requirements")
		textRequirements(&b, states[0])
	}
	textHeading(&b, "States")
	for _, st := range states {
		fmt.Fprintf(&b, "  %s — %s\n", st.ID, st.Summary)
	}
	for _, st := range states {
		fmt.Fprintf(&b, "\n%s\n%s\n", st.ID, strings.Repeat("=", len(st.ID)))
		textState(&b, st, "~")
	}
	return b.String()
}

func textHeading(b *strings.Builder, s string) {
	fmt.Fprintf(b, "\n%s\n%s\n", s, strings.Repeat("-", len(s)))
}

func textRequirements(b *strings.Builder, info Info) {
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	for _, r := range requirements(info) {
		fmt.Fprintf(tw, "  %s\t%s\n", r[0], r[1])
	}
	tw.Flush()
}

// textState writes one state's sections, their headings underlined with
// rule.
func textState(b *strings.Builder, info Info, rule string) {
	heading := func(s string) { fmt.Fprintf(b, "\n%s\n%s\n", s, strings.Repeat(rule, len(s))) }
	fmt.Fprintf(b, "%s — %s\n", info.ID, info.Summary)
	fmt.Fprintf(b, "\nChanges when:\n  %s\n", orNone(info.ChangesWhen))
	fmt.Fprintf(b, "\nDoes not change when:\n  %s\n", orNone(info.UnchangedWhen))
	fmt.Fprintf(b, "\nIn a check run:\n  %s\n", checkMode(info))

	heading("Parameters")
	if len(info.Params) == 0 {
		b.WriteString("None.\n")
	} else {
		tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "PARAMETER\tTYPE\tREQUIRED / DEFAULT\tDESCRIPTION")
		for _, p := range info.Params {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", p.Name, paramType(p), requiredOrDefault(p, ""), oneLine(paramDoc(p)))
		}
		tw.Flush()
	}
	for _, g := range info.Exclusive {
		fmt.Fprintf(b, "\n%s\n", groupText(g, ""))
	}

	if info.Example != "" {
		heading("Example")
		for _, line := range strings.Split(strings.TrimRight(info.Example, "\n"), "\n") {
			fmt.Fprintf(b, "  %s\n", line)
		}
	}

	heading("Output")
	if len(info.Output) == 0 {
		b.WriteString("None.\n")
	} else {
		tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "FIELD\tTYPE\tDESCRIPTION")
		for _, f := range info.Output {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", f.Name, f.Type, oneLine(f.Doc))
		}
		tw.Flush()
	}

	if len(info.Notes) > 0 {
		heading("Notes")
		for _, n := range info.Notes {
			fmt.Fprintf(b, "  * %s\n", n)
		}
	}
}

// requirements returns the label/value pairs of the requirements section.
func requirements(info Info) [][2]string {
	root := "not required"
	if info.NeedsRoot {
		root = "required (sudo is used when the connecting user is not root)"
	}
	side := "soul-side: runs on the step's target souls"
	if info.Side == SideKeeper {
		side = "keeper-side: runs inside the keeper; the step must say `on: keeper`"
	}
	idem := "yes: a repeat with the same params is safe"
	if !info.Idempotent {
		idem = "no: a repeat runs again; guard it with `when:` / `changed_when:`"
	}
	out := [][2]string{{"Root", root}, {"Side", side}, {"Idempotent", idem}}
	if info.Collection != "" {
		out = append(out, [2]string{"Collection", info.Collection})
	}
	if info.Category != "" {
		out = append(out, [2]string{"Category", info.Category})
	}
	if info.Permission != "" {
		out = append(out, [2]string{"Permission", info.Permission + " (the run's creator needs it besides run.create; checked when the run is submitted and again when the step runs)"})
	}
	return out
}

func paramType(p Param) string {
	t := p.describeType()
	if p.Secret {
		t += ", secret"
	}
	return t
}

func (p Param) describeType() string {
	if p.Elem != "" && p.Elem != TypeAny {
		return fmt.Sprintf("%s<%s>", p.Type, p.Elem)
	}
	return string(p.Type)
}

func requiredOrDefault(p Param, quote string) string {
	switch {
	case p.Required:
		return "required"
	case p.Default != nil:
		return "default " + quote + formatDefault(p.Default) + quote
	case p.DefaultDoc != "":
		return "default: " + p.DefaultDoc
	}
	return "optional"
}

func formatDefault(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func paramDoc(p Param) string {
	doc := p.Doc
	if len(p.Enum) > 0 {
		doc = strings.TrimSpace(doc + " One of: " + strings.Join(p.Enum, ", ") + ".")
	}
	return doc
}

func groupText(g Group, quote string) string {
	names := make([]string, len(g.Params))
	for i, n := range g.Params {
		names[i] = quote + n + quote
	}
	if g.Required {
		return "Exactly one of " + strings.Join(names, ", ") + " is required."
	}
	return "Mutually exclusive: " + strings.Join(names, ", ") + " (give at most one)."
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

// cell makes s safe inside a Markdown table cell.
func cell(s string) string {
	return strings.ReplaceAll(oneLine(s), "|", `\|`)
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// checkMode is what a catalog page says of the module in a check run.
func checkMode(info Info) string {
	if info.CheckMode == "" {
		return "No check path: a check run reports every target unknown, and never runs the module."
	}
	return info.CheckMode
}
