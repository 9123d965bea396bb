package cli

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/spf13/cobra"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/version"
)

// versionInfo is the JSON form of soulctl version: soulctl's own version,
// and the keeper's unless --client.
type versionInfo struct {
	Version string          `json:"version"`
	Go      string          `json:"go"`
	Keeper  *client.Version `json:"keeper,omitempty"`
	URL     string          `json:"keeper_url,omitempty"`
}

// versionTimeout bounds soulctl version's question to the keeper.
const versionTimeout = 10 * time.Second

func (a *app) versionCommand() *cobra.Command {
	var clientOnly bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print soulctl's version and the keeper's",
		Long: `Print soulctl's version and the version of the keeper it talks to
(GET /v1/version, any valid token). An unreachable keeper or a refused
token is an error after soulctl's own line; --client asks no keeper.`,
		Example: `  soulctl version
  soulctl version --client -o json`,
		Args: cobra.NoArgs,
		RunE: a.action(func(cmd *cobra.Command, _ []string, p *printer) error {
			v := versionInfo{Version: version.String(), Go: runtime.Version()}
			own := fmt.Sprintf("soulctl %s (%s)\n", v.Version, v.Go)
			if clientOnly {
				return p.print(v, text(own))
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), versionTimeout)
			defer cancel()
			k, err := c.Version(ctx)
			if err != nil {
				if !p.json {
					fmt.Fprint(cmd.OutOrStdout(), own)
				}
				return err
			}
			v.Keeper, v.URL = k, a.resolvedURL
			return p.print(v, text(own+fmt.Sprintf("keeper  %s (%s) at %s\n", k.Version, k.Go, a.resolvedURL)))
		}),
	}
	cmd.Flags().BoolVar(&clientOnly, "client", false, "only soulctl's version; ask no keeper")
	return cmd
}
