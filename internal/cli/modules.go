package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/module"
)

func (a *app) modulesCommand() *cobra.Command {
	return group("modules", "Browse the module catalog",
		a.modulesListCommand(),
		a.modulesShowCommand(),
	)
}

func (a *app) modulesListCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Short:   "List the module states the keeper can run",
		Example: `  soulctl modules list`,
		Args:    cobra.NoArgs,
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
		Example: `  soulctl modules show core.pkg.installed
  soulctl modules show core.cloud`,
		Long: `Show a module's catalog page: requirements, the state with when it changes,
the params and output tables, an example and notes. ID is namespace.module.state,
for example core.command.ran, or namespace.module for the page of all its states,
for example core.cloud (created, destroyed, resized) with its collection and
category.`,
		Args: exactArgs("ID"),
		RunE: a.action(func(cmd *cobra.Command, args []string, p *printer) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			if strings.Count(args[0], ".") == 1 {
				f, err := c.ModuleFamilyGet(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				return p.print(f, familyPage(*f))
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
	// The wire object carries the declaration's JSON; the catalog's own
	// renderer draws the page.
	b, err := json.Marshal(client.Module(m))
	if err != nil {
		return err
	}
	var info module.Info
	if err := json.Unmarshal(b, &info); err != nil {
		return fmt.Errorf("decode module %s: %w", m.ID, err)
	}
	_, err = io.WriteString(w, module.RenderText(info))
	return err
}

// familyPage is a module family's catalog page for a terminal.
type familyPage client.ModuleFamily

func (f familyPage) render(w io.Writer) error {
	states := make([]module.Info, 0, len(f.States))
	for _, m := range f.States {
		b, err := json.Marshal(m)
		if err != nil {
			return err
		}
		var info module.Info
		if err := json.Unmarshal(b, &info); err != nil {
			return fmt.Errorf("decode module %s: %w", m.ID, err)
		}
		states = append(states, info)
	}
	_, err := io.WriteString(w, module.RenderFamilyText(module.Family{Name: f.Name, Summary: f.Summary, Description: f.Description}, states))
	return err
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
