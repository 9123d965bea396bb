package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/soulstack/soulstack/client"
)

func (a *app) profileCommand() *cobra.Command {
	return group("profile", "Register, inspect and share VM profiles", append([]*cobra.Command{
		a.profileCreateCommand(),
		a.profileListCommand(),
		a.profileGetCommand(),
		a.profileDeleteCommand(),
	}, a.shareCommands("profile",
		func(ctx context.Context, c *client.Client, name, project string) error {
			_, err := c.ProfileShare(ctx, name, project)
			return err
		},
		func(ctx context.Context, c *client.Client, name, project string) error {
			return c.ProfileUnshare(ctx, name, project)
		},
	)...)...)
}

func (a *app) profileCreateCommand() *cobra.Command {
	var in client.ProfileCreate
	var spec string
	cmd := &cobra.Command{
		Use:   "create NAME --provider PROVIDER",
		Short: "Register a VM profile on a provider",
		Long: `Register a VM profile: a registered provider and the driver-specific VM
parameters (image, size, network…) as a JSON object.`,
		Example: `  soulctl profile create small --provider local --spec '{"cpus": 1, "memory_mb": 512, "ssh_user": "root"}'
  soulctl profile create web --provider hetzner --spec @web.json`,
		Args: exactArgs("NAME"),
		RunE: a.action(func(cmd *cobra.Command, args []string, p *printer) error {
			s, err := jsonObject("spec", spec, cmd.InOrStdin())
			if err != nil {
				return err
			}
			if s == nil {
				s = map[string]any{}
			}
			in.Name, in.Spec = args[0], s
			c, err := a.client()
			if err != nil {
				return err
			}
			pf, err := c.ProfileCreate(cmd.Context(), in)
			if err != nil {
				return err
			}
			return p.print(pf, profileRecord(pf))
		}),
	}
	fs := cmd.Flags()
	fs.StringVar(&in.Provider, "provider", "", "name of a registered provider (required)")
	fs.StringVar(&spec, "spec", "", "VM parameters: a JSON object, @file.json, or @- for stdin (default {})")
	fs.StringVar(&in.Project, "project", "", "the project it goes into (a keeper-wide token's choice; default: the default project, or the token's own)")
	_ = cmd.MarkFlagRequired("provider")
	return cmd
}

func (a *app) profileListCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Short:   "List profiles",
		Example: `  soulctl profile list`,
		Args:    cobra.NoArgs,
		RunE: a.action(func(cmd *cobra.Command, _ []string, p *printer) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			items, err := listAll(cmd.Context(), func(ctx context.Context, o client.ListOptions) ([]client.Profile, string, error) {
				l, err := c.ProfileList(ctx, o)
				if err != nil {
					return nil, "", err
				}
				return l.Items, l.Next, nil
			})
			if err != nil {
				return err
			}
			t := &table{header: []string{"NAME", "PROVIDER", "SPEC", "CREATED"}}
			for _, pf := range items {
				t.add(pf.Name, pf.Provider, compactJSON(pf.Spec), timestamp(pf.CreatedAt))
			}
			return p.print(client.ProfileList{Items: items}, t)
		}),
	}
}

func (a *app) profileGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "get NAME",
		Short:   "Show a profile",
		Example: `  soulctl profile get small -o yaml`,
		Args:    exactArgs("NAME"),
		RunE: a.action(func(cmd *cobra.Command, args []string, p *printer) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			pf, err := c.ProfileGet(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return p.print(pf, profileRecord(pf))
		}),
	}
}

func (a *app) profileDeleteCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "delete NAME",
		Short:   "Delete a profile",
		Example: `  soulctl profile delete small`,
		Long:    "Delete a profile. With -o json nothing is printed on success.",
		Args:    exactArgs("NAME"),
		RunE: a.action(func(cmd *cobra.Command, args []string, p *printer) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			if err := c.ProfileDelete(cmd.Context(), args[0]); err != nil {
				return err
			}
			return p.print(nil, text(fmt.Sprintf("profile %q deleted\n", args[0])))
		}),
	}
}

func profileRecord(p *client.Profile) record {
	return record{
		{"Name", p.Name},
		{"Provider", p.Provider},
		{"Spec", compactJSON(p.Spec)},
		{"Project", p.Project},
		{"Shared with", strings.Join(p.SharedWith, ", ")},
		{"Created", timestamp(p.CreatedAt)},
		{"Created by", p.CreatedBy},
	}
}
