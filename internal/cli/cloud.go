package cli

import (
	"github.com/spf13/cobra"

	"github.com/soulstack/soulstack/client"
)

func (a *app) cloudCommand() *cobra.Command {
	return group("cloud", "Work with the clouds behind the providers", a.cloudOrphansCommand())
}

func (a *app) cloudOrphansCommand() *cobra.Command {
	var provider string
	var destroy bool
	cmd := &cobra.Command{
		Use:   "orphans [--provider P] [--destroy]",
		Short: "List (or destroy) VMs that no soul owns",
		Long: `List the VMs a provider's driver reports with a keeper request tag that no
live soul row owns: what a keeper crash in the middle of core.cloud.created
leaves behind. The request, run and step that made each one are shown.
With --destroy (and --provider) those VMs are destroyed; each must still be
an orphan when the keeper checks again, and the destroy is audited.`,
		Example: `  soulctl cloud orphans
  soulctl cloud orphans --provider local --destroy`,
		Args: cobra.NoArgs,
		RunE: a.action(func(cmd *cobra.Command, _ []string, p *printer) error {
			if destroy && provider == "" {
				return usageErrorf("--destroy needs --provider")
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			list, err := c.CloudOrphans(cmd.Context(), provider)
			if err != nil {
				return err
			}
			if destroy && len(list.Items) > 0 {
				ids := make([]string, len(list.Items))
				for i, o := range list.Items {
					ids[i] = o.VMID
				}
				if list, err = c.CloudOrphansDestroy(cmd.Context(), client.OrphansDestroy{Provider: provider, VMIDs: ids}); err != nil {
					return err
				}
			}
			t := &table{header: []string{"PROVIDER", "VM_ID", "FQDN", "PRIMARY_IP", "REQUEST", "RUN", "STEP"}}
			if destroy {
				t.header = append(t.header, "ACTION")
			}
			for _, o := range list.Items {
				row := []string{o.Provider, o.VMID, o.FQDN, o.PrimaryIP, o.RequestID, o.RunID, o.Step}
				if destroy {
					row = append(row, "destroyed")
				}
				t.add(row...)
			}
			return p.print(list, t)
		}),
	}
	cmd.Flags().StringVar(&provider, "provider", "", "only this provider")
	cmd.Flags().BoolVar(&destroy, "destroy", false, "destroy the orphans found (needs --provider)")
	return cmd
}
