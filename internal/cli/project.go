package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/soulstack/soulstack/client"
)

func (a *app) projectCommand() *cobra.Command {
	var in client.ProjectCreate
	create := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a project",
		Args:  exactArgs("NAME"),
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
	list := &cobra.Command{
		Use:   "list",
		Short: "List projects",
		Args:  cobra.NoArgs,
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
		Use:   "get NAME",
		Short: "Show a project",
		Args:  exactArgs("NAME"),
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
		Use:   "delete NAME",
		Short: "Delete a project (never the default one)",
		Args:  exactArgs("NAME"),
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
	return group("project", "Create and inspect projects (project.manage)", create, list, get, del)
}

func projectRecord(p *client.Project) record {
	return record{{"Name", p.Name}, {"Description", p.Description}, {"Created", timestamp(p.CreatedAt)}, {"Created by", p.CreatedBy}}
}
