package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/soulstack/soulstack/client"
)

func (a *app) projectCommand() *cobra.Command {
	list := &cobra.Command{
		Use:     "list",
		Short:   "List projects",
		Example: `  soulctl project list`,
		Args:    cobra.NoArgs,
		RunE: a.action(func(cmd *cobra.Command, _ []string, p *printer) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			items, err := listAll(cmd.Context(), func(ctx context.Context, o client.ListOptions) ([]client.Project, string, error) {
				l, err := c.ProjectList(ctx, o)
				if err != nil {
					return nil, "", err
				}
				return l.Items, l.Next, nil
			})
			if err != nil {
				return err
			}
			t := &table{header: []string{"NAME", "DESCRIPTION", "CREATED", "CREATED_BY"}}
			for _, pr := range items {
				t.add(pr.Name, pr.Description, timestamp(pr.CreatedAt), pr.CreatedBy)
			}
			return p.print(client.ProjectList{Items: items}, t)
		}),
	}
	get := &cobra.Command{
		Use:     "get NAME",
		Short:   "Show a project",
		Example: `  soulctl project get team-a`,
		Args:    exactArgs("NAME"),
		RunE: a.action(func(cmd *cobra.Command, args []string, p *printer) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			pr, err := c.ProjectGet(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return p.print(pr, projectRecord(pr))
		}),
	}
	del := &cobra.Command{
		Use:     "delete NAME",
		Short:   "Delete a project (never the default one)",
		Example: `  soulctl project delete team-a`,
		Args:    exactArgs("NAME"),
		RunE: a.action(func(cmd *cobra.Command, args []string, p *printer) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			if err := c.ProjectDelete(cmd.Context(), args[0]); err != nil {
				return err
			}
			return p.print(nil, text(fmt.Sprintf("project %q deleted\n", args[0])))
		}),
	}
	return group("project", "Create and inspect projects, their role bindings and quotas", a.projectCreate(), list, get, del,
		a.bindCommand(), a.unbindCommand(), a.bindingsCommand(), a.quotaCommand())
}

func (a *app) bindCommand() *cobra.Command {
	var in client.BindingPut
	var group, person string
	cmd := &cobra.Command{
		Use:   "bind PROJECT (--group G | --person 'ISSUER SUBJECT') --role ROLE",
		Short: "Give a group or a person a role in a project (what they get at an OIDC sign-in to it)",
		Example: `  soulctl project bind team-a --group platform --role operator
  soulctl project bind team-a --person 'https://idp.example.com 248289761001' --role viewer`,
		Args: exactArgs("PROJECT"),
		RunE: a.action(func(cmd *cobra.Command, args []string, p *printer) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			in.Kind, in.Subject = "group", group
			if person != "" {
				in.Kind, in.Subject = "person", person
			}
			b, err := c.BindingPut(cmd.Context(), args[0], in)
			if err != nil {
				return err
			}
			return p.print(b, text(fmt.Sprintf("%s %q is %s in project %s\n", b.Kind, b.Subject, b.Role, b.Project)))
		}),
	}
	fs := cmd.Flags()
	fs.StringVar(&group, "group", "", "a value of the OIDC groups claim")
	fs.StringVar(&person, "person", "", "one person: the issuer and subject of their ID token, joined by a space")
	fs.StringVar(&in.Role, "role", "", "admin, operator or viewer")
	cmd.MarkFlagsMutuallyExclusive("group", "person")
	cmd.MarkFlagsOneRequired("group", "person")
	_ = cmd.MarkFlagRequired("role")
	return cmd
}

func (a *app) unbindCommand() *cobra.Command {
	var group, person string
	cmd := &cobra.Command{
		Use:     "unbind PROJECT (--group G | --person 'ISSUER SUBJECT')",
		Short:   "Remove a role binding",
		Example: `  soulctl project unbind team-a --group platform`,
		Args:    exactArgs("PROJECT"),
		RunE: a.action(func(cmd *cobra.Command, args []string, p *printer) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			kind, subject := "group", group
			if person != "" {
				kind, subject = "person", person
			}
			if err := c.BindingDelete(cmd.Context(), args[0], kind, subject); err != nil {
				return err
			}
			return p.print(nil, text(fmt.Sprintf("%s %q has no role in project %s any more\n", kind, subject, args[0])))
		}),
	}
	cmd.Flags().StringVar(&group, "group", "", "a value of the OIDC groups claim")
	cmd.Flags().StringVar(&person, "person", "", "the issuer and subject of the person's ID token, joined by a space")
	cmd.MarkFlagsMutuallyExclusive("group", "person")
	cmd.MarkFlagsOneRequired("group", "person")
	return cmd
}

func (a *app) bindingsCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "bindings PROJECT",
		Short:   "List a project's role bindings",
		Example: `  soulctl project bindings team-a`,
		Args:    exactArgs("PROJECT"),
		RunE: a.action(func(cmd *cobra.Command, args []string, p *printer) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			l, err := c.BindingList(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			t := &table{header: []string{"KIND", "SUBJECT", "ROLE", "CREATED", "CREATED_BY"}}
			for _, b := range l.Items {
				t.add(b.Kind, b.Subject, b.Role, timestamp(b.CreatedAt), b.CreatedBy)
			}
			return p.print(l, t)
		}),
	}
}

func (a *app) quotaCommand() *cobra.Command {
	var q client.Quota
	cmd := &cobra.Command{
		Use:   "quota PROJECT [--vms N] [--vcpus N] [--memory-mb N] [--runs N]",
		Short: "Set a project's quota (0 or left out: no limit)",
		Example: `  soulctl project quota team-a --vms 20 --vcpus 40 --memory-mb 81920 --runs 5
  soulctl project quota team-a`,
		Args: exactArgs("PROJECT"),
		RunE: a.action(func(cmd *cobra.Command, args []string, p *printer) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			pr, err := c.ProjectSetQuota(cmd.Context(), args[0], q)
			if err != nil {
				return err
			}
			return p.print(pr, projectRecord(pr))
		}),
	}
	fs := cmd.Flags()
	fs.IntVar(&q.VMs, "vms", 0, "VMs alive and being made")
	fs.IntVar(&q.VCPUs, "vcpus", 0, "their vCPUs (as their profiles' cpus state)")
	fs.IntVar(&q.MemoryMB, "memory-mb", 0, "their memory in MB (as their profiles' memory_mb state)")
	fs.IntVar(&q.Runs, "runs", 0, "runs not finished")
	return cmd
}

// shareCommands are the share and unshare commands of providers or
// profiles (kind).
func (a *app) shareCommands(kind string, share func(ctx context.Context, c *client.Client, name, project string) error,
	unshare func(ctx context.Context, c *client.Client, name, project string) error) []*cobra.Command {
	mk := func(verb, short string, do func(ctx context.Context, c *client.Client, name, project string) error, done string) *cobra.Command {
		return &cobra.Command{
			Use:     verb + " NAME PROJECT",
			Short:   short,
			Example: "  soulctl " + kind + " " + verb + " shared-" + kind + " team-a",
			Args:    exactArgs("NAME", "PROJECT"),
			RunE: a.action(func(cmd *cobra.Command, args []string, p *printer) error {
				c, err := a.client()
				if err != nil {
					return err
				}
				if err := do(cmd.Context(), c, args[0], args[1]); err != nil {
					return err
				}
				return p.print(nil, text(fmt.Sprintf("%s %q %s project %s\n", kind, args[0], done, args[1])))
			}),
		}
	}
	return []*cobra.Command{
		mk("share", "Let another project read and use a "+kind+" (never manage it)", share, "is shared with"),
		mk("unshare", "Take a "+kind+"'s share back", unshare, "is no longer shared with"),
	}
}

func projectRecord(p *client.Project) record {
	limit := func(n int) string {
		if n == 0 {
			return "no limit"
		}
		return fmt.Sprint(n)
	}
	return record{{"Name", p.Name}, {"Description", p.Description},
		{"Quota VMs", limit(p.Quota.VMs)}, {"Quota vCPUs", limit(p.Quota.VCPUs)}, {"Quota memory MB", limit(p.Quota.MemoryMB)}, {"Quota runs", limit(p.Quota.Runs)},
		{"Created", timestamp(p.CreatedAt)}, {"Created by", p.CreatedBy}}
}

// projectCreate is soulctl project create.
func (a *app) projectCreate() *cobra.Command {
	var in client.ProjectCreate
	create := &cobra.Command{
		Use:     "create NAME",
		Short:   "Create a project",
		Example: `  soulctl project create team-a`,
		Args:    exactArgs("NAME"),
		RunE: a.action(func(cmd *cobra.Command, args []string, p *printer) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			in.Name = args[0]
			pr, err := c.ProjectCreate(cmd.Context(), in)
			if err != nil {
				return err
			}
			return p.print(pr, projectRecord(pr))
		}),
	}
	create.Flags().StringVar(&in.Description, "description", "", "what the project is for")
	return create
}
