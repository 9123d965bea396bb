package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/soulstack/soulstack/client"
)

// credentialCommand manages a project's credentials registry: secrets its
// providers and souls name as credential:NAME, stored sealed, never read
// back.
func (a *app) credentialCommand() *cobra.Command {
	var project string
	cmd := group("credential", "Manage a project's secrets (credential:NAME references)",
		a.credentialPutCommand(&project), a.credentialListCommand(&project), a.credentialDeleteCommand(&project))
	cmd.PersistentFlags().StringVar(&project, "project", "", "the project whose registry it is (default: the token's project, else default)")
	return cmd
}

// projectClient is the keeper's client and the project a credential
// command acts in: --project, else the token's own project, else the
// default project.
func (a *app) projectClient(ctx context.Context, project string) (*client.Client, string, error) {
	c, err := a.client()
	if err != nil || project != "" {
		return c, project, err
	}
	w, err := c.Whoami(ctx)
	switch {
	case err != nil:
		return nil, "", err
	case w.Project != "":
		return c, w.Project, nil
	}
	return c, "default", nil
}

func (a *app) credentialPutCommand(project *string) *cobra.Command {
	var fromFile string
	put := &cobra.Command{
		Use:   "put NAME",
		Short: "Store a secret in a project's credentials registry",
		Long: `Store (or replace) a secret its project's providers and souls name as
credential:NAME (--credentials-ref, --key-ref). The value is read from
--from-file, else from standard input (a terminal's trailing newline is
dropped); the keeper seals it and never shows it again. Needs
credential.manage in the project.`,
		Example: `  soulctl credential put hcloud --project web --from-file hcloud.token
  soulctl provider create hetzner --driver hcloud --project web --credentials-ref credential:hcloud`,
		Args: exactArgs("NAME"),
		RunE: a.action(func(cmd *cobra.Command, args []string, p *printer) error {
			value, err := readSecret(cmd.InOrStdin(), fromFile)
			if err != nil {
				return err
			}
			c, project, err := a.projectClient(cmd.Context(), *project)
			if err != nil {
				return err
			}
			cr, err := c.CredentialPut(cmd.Context(), project, args[0], value)
			if err != nil {
				return err
			}
			return p.print(cr, text(fmt.Sprintf("credential %s stored in project %s: name it %s\n", cr.Name, cr.Project, cr.Ref)))
		}),
	}
	put.Flags().StringVar(&fromFile, "from-file", "", "read the secret from this file (default: standard input)")
	return put
}

// readSecret reads a secret from file, else from stdin (64 KiB at most),
// without its trailing newlines; an empty one is a usage error.
func readSecret(stdin io.Reader, file string) (string, error) {
	var b []byte
	var err error
	if file != "" {
		b, err = os.ReadFile(file)
	} else {
		b, err = io.ReadAll(io.LimitReader(stdin, 64<<10+1))
	}
	if err != nil {
		return "", usageErrorf("read the secret: %v", err)
	}
	value := strings.TrimRight(string(b), "\r\n")
	if value == "" {
		return "", usageErrorf("the secret is empty: give --from-file or pipe it to standard input")
	}
	return value, nil
}

func (a *app) credentialListCommand(project *string) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List a project's credentials (names, never values)",
		Example: `  soulctl credential list
  soulctl credential list --project team-a`,
		Args: cobra.NoArgs,
		RunE: a.action(func(cmd *cobra.Command, _ []string, p *printer) error {
			c, project, err := a.projectClient(cmd.Context(), *project)
			if err != nil {
				return err
			}
			l, err := c.CredentialList(cmd.Context(), project)
			if err != nil {
				return err
			}
			t := &table{header: []string{"NAME", "REF", "CREATED", "CREATED_BY"}}
			for _, cr := range l.Items {
				t.add(cr.Name, cr.Ref, timestamp(cr.CreatedAt), cr.CreatedBy)
			}
			return p.print(l, t)
		}),
	}
}

func (a *app) credentialDeleteCommand(project *string) *cobra.Command {
	return &cobra.Command{
		Use:     "delete NAME",
		Short:   "Delete a credential (what names it no longer resolves)",
		Example: `  soulctl credential delete deploy-key`,
		Args:    exactArgs("NAME"),
		RunE: a.action(func(cmd *cobra.Command, args []string, p *printer) error {
			c, project, err := a.projectClient(cmd.Context(), *project)
			if err != nil {
				return err
			}
			if err := c.CredentialDelete(cmd.Context(), project, args[0]); err != nil {
				return err
			}
			return p.print(map[string]string{"deleted": args[0]}, text(fmt.Sprintf("credential %s deleted from project %s\n", args[0], project)))
		}),
	}
}
