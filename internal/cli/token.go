package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/soulstack/soulstack/client"
)

func (a *app) tokenCommand() *cobra.Command {
	return group("token", "Issue, list and revoke API tokens",
		a.tokenCreateCommand(),
		a.tokenListCommand(),
		a.tokenRevokeCommand(),
	)
}

func (a *app) tokenCreateCommand() *cobra.Command {
	var in client.TokenCreate
	var expiresIn string
	var perms []string
	cmd := &cobra.Command{
		Use:   "create NAME (--role ROLE | --permissions P,...)",
		Short: "Issue an API token",
		Long: `Issue an API token for NAME with a role: admin (everything), operator (all
reads, start and cancel runs, but no cloud.* permission) or viewer (reads); or
with an explicit permission list instead (its role is then "custom"), e.g.
--permissions run.read,run.create,cloud.create. The keeper refuses unknown
permissions and any permission the token you issue it with does not hold.
The token is printed once; the keeper keeps only its hash.`,
		Example: `  soulctl token create ci --role operator --expires-in 720h
  soulctl token create spawner --permissions run.read,run.create,cloud.create,cloud.destroy
  SOULSTACK_TOKEN=$(soulctl token create dashboards --role viewer -o json | jq -r .token)`,
		Args: exactArgs("NAME"),
		RunE: a.action(func(cmd *cobra.Command, args []string, p *printer) error {
			in.Name = args[0]
			if cmd.Flags().Changed("permissions") {
				in.Permissions = append([]string{}, perms...)
			}
			if expiresIn != "" {
				d, err := duration("expires-in", expiresIn)
				if err != nil {
					return err
				}
				at := time.Now().Add(d).UTC().Truncate(time.Second)
				in.ExpiresAt = &at
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			t, err := c.TokenCreate(cmd.Context(), in)
			if err != nil {
				return err
			}
			return p.print(t, tokenCreatedText(t))
		}),
	}
	fs := cmd.Flags()
	fs.StringVar(&in.Role, "role", "", "admin, operator or viewer")
	fs.StringSliceVar(&perms, "permissions", nil, "explicit permissions instead of a role, comma-separated (e.g. run.create,cloud.create)")
	fs.StringVar(&expiresIn, "expires-in", "", "lifetime, e.g. 720h or 30d (default: never expires)")
	fs.StringVar(&in.Project, "project", "", "the one project the token acts in (default: keeper-wide for a keeper-wide caller, else the caller's project)")
	cmd.MarkFlagsMutuallyExclusive("role", "permissions")
	cmd.MarkFlagsOneRequired("role", "permissions")
	return cmd
}

func tokenCreatedText(t *client.TokenCreated) text {
	expires := "never expires"
	if t.ExpiresAt != nil {
		expires = "expires " + timestamp(*t.ExpiresAt)
	}
	var b strings.Builder
	grant := "role " + t.Role
	if t.Role == "custom" {
		grant = "permissions " + strings.Join(t.Permissions, ", ")
	}
	fmt.Fprintf(&b, "Created API token %s %q (%s, %s).\n\n", t.ID, t.Name, grant, expires)
	fmt.Fprintf(&b, "    %s\n\n", t.Token)
	fmt.Fprintf(&b, "This token is shown only once: store it now. Use it with --token or %s.\n", EnvToken)
	return text(b.String())
}

func (a *app) tokenListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List API tokens (never the tokens themselves)",
		Example: `  soulctl token list
  soulctl token list -o json`,
		Args: cobra.NoArgs,
		RunE: a.action(func(cmd *cobra.Command, _ []string, p *printer) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			items, err := listAll(cmd.Context(), func(ctx context.Context, o client.ListOptions) ([]client.Token, string, error) {
				l, err := c.TokenList(ctx, o)
				if err != nil {
					return nil, "", err
				}
				return l.Items, l.Next, nil
			})
			if err != nil {
				return err
			}
			t := &table{header: []string{"ID", "NAME", "ROLE", "STATUS", "EXPIRES", "CREATED", "CREATED_BY", "PERMISSIONS"}}
			for _, tk := range items {
				expires := "never"
				if tk.ExpiresAt != nil {
					expires = timestamp(*tk.ExpiresAt)
				}
				// A built-in role's permissions are the role's; -o json
				// lists them.
				perms := "-"
				if tk.Role == "custom" {
					perms = strings.Join(tk.Permissions, ",")
				}
				t.add(tk.ID, tk.Name, tk.Role, tokenStatus(tk), expires, timestamp(tk.CreatedAt), tk.CreatedBy, perms)
			}
			return p.print(client.TokenList{Items: items}, t)
		}),
	}
}

// tokenStatus says whether a token works: active, revoked or expired.
func tokenStatus(t client.Token) string {
	switch {
	case t.RevokedAt != nil:
		return "revoked"
	case !t.Active:
		return "expired"
	}
	return "active"
}

func (a *app) tokenRevokeCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "revoke ID",
		Short:   "Revoke an API token",
		Example: `  soulctl token revoke tok_0123456789abcdef`,
		Long: `Revoke an API token by its id (tok_…, see "soulctl token list"). It stops
working at once. The last active admin token cannot be revoked. With -o json
nothing is printed on success.`,
		Args: exactArgs("ID"),
		RunE: a.action(func(cmd *cobra.Command, args []string, p *printer) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			if err := c.TokenRevoke(cmd.Context(), args[0]); err != nil {
				return err
			}
			return p.print(nil, text(fmt.Sprintf("token %s revoked\n", args[0])))
		}),
	}
}
