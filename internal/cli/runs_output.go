package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

func (a *app) runsOutputCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "output ID [STEP]",
		Short: "Print a run's outputs (or one step's) as JSON",
		Long: `Print the outputs of a run as a JSON object by step name, or with STEP the
output of that step only, masked as every keeper answer is. The result is
ready to feed another run with --input-file:

  soulctl runs output RUN_ID provision > hosts.json
  soulctl run examples/destroy-local.yaml --input-file hosts.json`,
		Args: cobra.RangeArgs(1, 2),
		RunE: a.action(func(cmd *cobra.Command, args []string, _ *printer) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			r, err := c.RunGet(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			out := []byte(r.Outputs)
			if len(args) == 2 {
				var steps map[string]json.RawMessage
				if err := json.Unmarshal(r.Outputs, &steps); err != nil {
					return fmt.Errorf("decode outputs of run %s: %w", r.ID, err)
				}
				step, ok := steps[args[1]]
				if !ok {
					return usageErrorf("run %s has no output of step %q", r.ID, args[1])
				}
				out = step
			}
			var pretty bytes.Buffer
			if err := json.Indent(&pretty, out, "", "  "); err != nil {
				return fmt.Errorf("outputs of run %s are not JSON: %w", r.ID, err)
			}
			pretty.WriteByte('\n')
			_, err = io.Copy(a.env.Stdout, &pretty)
			return err
		}),
	}
}
