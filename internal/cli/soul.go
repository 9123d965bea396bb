package cli

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/soulstack/soulstack/client"
)

func (a *app) soulCommand() *cobra.Command {
	return group("soul", "Register and inspect souls (managed hosts)",
		a.soulAddCommand(),
		a.soulListCommand(),
		a.soulGetCommand(),
		a.soulDeleteCommand(),
		a.soulSeedsCommand(),
		a.soulSeedCommand(),
		a.soulApplySeedCommand(),
	)
}

func (a *app) soulAddCommand() *cobra.Command {
	in := client.SoulCreate{Connection: client.Connection{Transport: "ssh"}}
	var attrs []string
	cmd := &cobra.Command{
		Use:   "add SID --address ADDRESS",
		Short: "Register an existing host as a soul",
		Long: `Register an existing host as a soul, reached over SSH. SID is the soul's id,
a DNS name (usually the host's FQDN). The host key is pinned on first contact.
Attribute values are strings.`,
		Example: `  soulctl soul add web1.example.com --address 192.0.2.10 --user deploy --key-ref credential:deploy-key --attr role=web --attr dc=fsn1`,
		Args:    exactArgs("SID"),
		RunE: a.action(func(cmd *cobra.Command, args []string, p *printer) error {
			m, err := keyValues("attr", attrs)
			if err != nil {
				return err
			}
			in.SID, in.Attributes = args[0], m
			c, err := a.client()
			if err != nil {
				return err
			}
			s, err := c.SoulCreate(cmd.Context(), in)
			if err != nil {
				return err
			}
			return p.print(s, soulRecord(s))
		}),
	}
	fs := cmd.Flags()
	fs.StringVar(&in.Address, "address", "", "IP address or host name to connect to (required)")
	fs.StringVar(&in.Connection.User, "user", "root", "SSH user; sudo is used when it is not root")
	fs.IntVar(&in.Connection.Port, "port", 22, "SSH port")
	fs.StringVar(&in.Connection.KeyRef, "key-ref", "", "reference to the SSH private key: credential:NAME (soulctl credential put), or env:NAME, file:/path (where keeper.yml allows), vault:<path>#<field>")
	fs.StringArrayVar(&attrs, "attr", nil, "attribute key=value (repeatable)")
	fs.StringVar(&in.Project, "project", "", "the project it goes into (a keeper-wide token's choice; default: the default project, or the token's own)")
	_ = cmd.MarkFlagRequired("address")
	return cmd
}

func (a *app) soulListCommand() *cobra.Command {
	var f client.SoulFilter
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List souls",
		Long: `List souls by SID. The filters combine: a soul is listed when it matches
every one given. --label KEY=VALUE matches an attribute whose value is the
string VALUE exactly.`,
		Example: `  soulctl soul list --status unreachable
  soulctl soul list --provider local --label role=web`,
		Args: cobra.NoArgs,
		RunE: a.action(func(cmd *cobra.Command, _ []string, p *printer) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			items, err := listAll(cmd.Context(), func(ctx context.Context, o client.ListOptions) ([]client.Soul, string, error) {
				l, err := c.SoulSearch(ctx, o, f)
				if err != nil {
					return nil, "", err
				}
				return l.Items, l.Next, nil
			})
			if err != nil {
				return err
			}
			t := &table{header: []string{"SID", "STATUS", "ADDRESS", "USER", "PORT", "PROVIDER", "LAST CONTACT", "CREATED"}}
			for _, s := range items {
				t.add(s.SID, s.Status, s.Address, s.Connection.User, port(s.Connection.Port), s.Provider, lastContact(s.LastSeenAt), timestamp(s.CreatedAt))
			}
			return p.print(client.SoulList{Items: items}, t)
		}),
	}
	fs := cmd.Flags()
	fs.StringVar(&f.Status, "status", "", "only souls in this status: pending, active, unreachable or destroyed")
	fs.StringVar(&f.Provider, "provider", "", "only souls made by this provider")
	fs.StringVar(&f.Label, "label", "", "only souls whose attribute KEY is VALUE, written KEY=VALUE")
	return cmd
}

func (a *app) soulGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get SID",
		Short: "Show a soul",
		Example: `  soulctl soul get db-1.example.com
  soulctl soul get db-1.example.com -o json`,
		Args: exactArgs("SID"),
		RunE: a.action(func(cmd *cobra.Command, args []string, p *printer) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			s, err := c.SoulGet(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return p.print(s, soulRecord(s))
		}),
	}
}

func (a *app) soulDeleteCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "delete SID",
		Short:   "Remove a soul from the registry",
		Example: `  soulctl soul delete db-1.example.com`,
		Long:    "Remove a soul from the registry; the host itself is not touched. With -o json nothing is printed on success.",
		Args:    exactArgs("SID"),
		RunE: a.action(func(cmd *cobra.Command, args []string, p *printer) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			if err := c.SoulDelete(cmd.Context(), args[0]); err != nil {
				return err
			}
			return p.print(nil, text(fmt.Sprintf("soul %q deleted\n", args[0])))
		}),
	}
}

func soulRecord(s *client.Soul) record {
	createdBy := "keeper"
	if s.CreatedByAID != nil {
		createdBy = *s.CreatedByAID
	}
	return record{
		{"SID", s.SID},
		{"Project", s.Project},
		{"Status", s.Status},
		{"Address", s.Address},
		{"Provider", s.Provider},
		{"VM id", s.VMID},
		{"Primary IP", s.PrimaryIP},
		{"Transport", s.Connection.Transport},
		{"Executor", s.Executor},
		{"User", s.Connection.User},
		{"Port", port(s.Connection.Port)},
		{"Key ref", s.Connection.KeyRef},
		{"Host key", s.Connection.HostKey},
		{"Attributes", compactJSON(s.Attributes)},
		{"Created", timestamp(s.CreatedAt)},
		{"Created by", createdBy},
		{"Updated", timestamp(s.UpdatedAt)},
		{"Last contact", lastContact(s.LastSeenAt)},
		{"Last error", s.LastError},
		{"Joined", lastContact(s.JoinedAt)},
		{"Cert serial", s.CertSerial},
		{"Cert expires", optionalTime(s.CertNotAfter)},
	}
}

func optionalTime(t *time.Time) string {
	if t == nil {
		return ""
	}
	return timestamp(*t)
}

// lastContact shows when a command last ran on a soul: "never" before the
// first contact.
func lastContact(t *time.Time) string {
	if t == nil {
		return "never"
	}
	return timestamp(*t)
}

func port(n int) string {
	if n == 0 {
		return ""
	}
	return strconv.Itoa(n)
}
