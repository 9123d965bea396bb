package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

func (a *app) runsOutputCommand() *cobra.Command {
	var sid string
	cmd := &cobra.Command{
		Use:   "output ID [STEP]",
		Short: "Print a run's outputs (or one step's, or one target's) whole, as JSON",
		Example: `  soulctl runs output run_0123456789abcdef
  soulctl runs output run_0123456789abcdef provision > vms.json`,
		Long: `Print the outputs of a run as a JSON object by step name, with STEP the
output of that step only, and with STEP --soul SID that one target's output,
masked as every keeper answer is. They come whole, as the run stored them
(up to runs.max_target_output_bytes per target): "runs get" cuts outputs
to fit (output_truncated). The result is ready to feed another run with
--input-file:

  soulctl runs output RUN_ID provision > hosts.json
  soulctl run examples/destroy-local.yaml --input-file hosts.json
  soulctl runs output RUN_ID build --soul db-1.example.com | jq -r .stdout`,
		Args: cobra.RangeArgs(1, 2),
		RunE: a.action(func(cmd *cobra.Command, args []string, _ *printer) error {
			step := ""
			if len(args) == 2 {
				step = args[1]
			}
			if sid != "" && step == "" {
				return usageErrorf("--soul needs STEP: a target's output is that of one step")
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			out, err := c.RunOutputs(cmd.Context(), args[0], step, sid)
			if err != nil {
				return err
			}
			var pretty bytes.Buffer
			if err := json.Indent(&pretty, out, "", "  "); err != nil {
				return fmt.Errorf("outputs of run %s are not JSON: %w", args[0], err)
			}
			pretty.WriteByte('\n')
			_, err = io.Copy(a.env.Stdout, &pretty)
			return err
		}),
	}
	cmd.Flags().StringVar(&sid, "soul", "", "with STEP: only this target's output")
	return cmd
}
