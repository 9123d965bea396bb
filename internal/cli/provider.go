package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/soulstack/soulstack/client"
)

func (a *app) providerCommand() *cobra.Command {
	return group("provider", "Register, inspect and share cloud providers", append([]*cobra.Command{
		a.providerCreateCommand(),
		a.providerListCommand(),
		a.providerGetCommand(),
		a.providerDeleteCommand(),
	}, a.shareCommands("provider",
		func(ctx context.Context, c *client.Client, name, project string) error {
			_, err := c.ProviderShare(ctx, name, project)
			return err
		},
		func(ctx context.Context, c *client.Client, name, project string) error {
			return c.ProviderUnshare(ctx, name, project)
		},
	)...)...)
}

func (a *app) providerCreateCommand() *cobra.Command {
	var in client.ProviderCreate
	var config string
	cmd := &cobra.Command{
		Use:   "create NAME --driver DRIVER",
		Short: "Register a cloud provider",
		Long: `Register a cloud provider: a CloudDriver plugin (soul-cloud-<driver>), an
optional region, a reference to its credentials (env:NAME, file:/path or
vault:<path>#<field>; never the credentials themselves), the DNS suffix of its
VMs and driver-specific settings as a JSON object.`,
		Example: `  soulctl provider create local --driver local --fqdn-suffix local.test --config '{"subnet": "10.213.0.0/24"}'
  soulctl provider create hetzner --driver hcloud --region fsn1 --credentials-ref env:HCLOUD_TOKEN --config @hcloud.json`,
		Args: exactArgs("NAME"),
		RunE: a.action(func(cmd *cobra.Command, args []string, p *printer) error {
			cfg, err := jsonObject("config", config, cmd.InOrStdin())
			if err != nil {
				return err
			}
			in.Name, in.Config = args[0], cfg
			c, err := a.client()
			if err != nil {
				return err
			}
			pr, err := c.ProviderCreate(cmd.Context(), in)
			if err != nil {
				return err
			}
			return p.print(pr, providerRecord(pr))
		}),
	}
	fs := cmd.Flags()
	fs.StringVar(&in.Driver, "driver", "", "CloudDriver plugin name (required)")
	fs.StringVar(&in.Region, "region", "", "region of the cloud account")
	fs.StringVar(&in.CredentialsRef, "credentials-ref", "", "reference to the credentials: credential:NAME (soulctl credential put), or env:NAME, file:/path (where keeper.yml allows), vault:<path>#<field>")
	fs.StringVar(&in.FQDNSuffix, "fqdn-suffix", "", "DNS suffix of the VMs' FQDNs, e.g. local.test")
	fs.StringVar(&config, "config", "", "driver settings: a JSON object, @file.json, or @- for stdin")
	fs.StringVar(&in.Project, "project", "", "the project it goes into (a keeper-wide token's choice; default: the default project, or the token's own)")
	_ = cmd.MarkFlagRequired("driver")
	return cmd
}

func (a *app) providerListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List providers",
		Example: `  soulctl provider list
  soulctl provider list -o 'jsonpath=$.items[*].name'`,
		Args: cobra.NoArgs,
		RunE: a.action(func(cmd *cobra.Command, _ []string, p *printer) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			items, err := listAll(cmd.Context(), func(ctx context.Context, o client.ListOptions) ([]client.Provider, string, error) {
				l, err := c.ProviderList(ctx, o)
				if err != nil {
					return nil, "", err
				}
				return l.Items, l.Next, nil
			})
			if err != nil {
				return err
			}
			t := &table{header: []string{"NAME", "DRIVER", "REGION", "CREDENTIALS_REF", "FQDN_SUFFIX", "CREATED"}}
			for _, pr := range items {
				t.add(pr.Name, pr.Driver, pr.Region, pr.CredentialsRef, pr.FQDNSuffix, timestamp(pr.CreatedAt))
			}
			return p.print(client.ProviderList{Items: items}, t)
		}),
	}
}

func (a *app) providerGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "get NAME",
		Short:   "Show a provider",
		Example: `  soulctl provider get hetzner -o json`,
		Args:    exactArgs("NAME"),
		RunE: a.action(func(cmd *cobra.Command, args []string, p *printer) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			pr, err := c.ProviderGet(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return p.print(pr, providerRecord(pr))
		}),
	}
}

func (a *app) providerDeleteCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "delete NAME",
		Short:   "Delete a provider that no profile uses",
		Example: `  soulctl provider delete hetzner`,
		Long:    "Delete a provider. The keeper refuses (provider.in_use) while profiles use it. With -o json nothing is printed on success.",
		Args:    exactArgs("NAME"),
		RunE: a.action(func(cmd *cobra.Command, args []string, p *printer) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			if err := c.ProviderDelete(cmd.Context(), args[0]); err != nil {
				return err
			}
			return p.print(nil, text(fmt.Sprintf("provider %q deleted\n", args[0])))
		}),
	}
}

func providerRecord(p *client.Provider) record {
	return record{
		{"Name", p.Name},
		{"Driver", p.Driver},
		{"Region", p.Region},
		{"Credentials ref", p.CredentialsRef},
		{"FQDN suffix", p.FQDNSuffix},
		{"Project", p.Project},
		{"Shared with", strings.Join(p.SharedWith, ", ")},
		{"Config", compactJSON(p.Config)},
		{"Created", timestamp(p.CreatedAt)},
		{"Created by", p.CreatedBy},
	}
}
