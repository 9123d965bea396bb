package cli

import (
	"github.com/spf13/cobra"

	"github.com/soulstack/soulstack/internal/version"
)

// versionInfo is the JSON form of soulctl version.
type versionInfo struct {
	Version string `json:"version"`
}

func (a *app) versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print soulctl's version",
		Args:  cobra.NoArgs,
		RunE: a.action(func(_ *cobra.Command, _ []string, p *printer) error {
			v := versionInfo{Version: version.String()}
			return p.print(v, text("soulctl "+v.Version+"\n"))
		}),
	}
}
