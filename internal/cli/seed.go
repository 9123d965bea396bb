package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/soulstack/soulstack/client"
)

func (a *app) soulSeedsCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "seeds SID",
		Short:   "List a soul's seeds",
		Example: `  soulctl soul seeds web-1.example.com`,
		Args:    exactArgs("SID"),
		RunE: a.action(func(cmd *cobra.Command, args []string, p *printer) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			l, err := c.SeedList(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			t := &table{header: []string{"ID", "STATUS", "CREATED BY", "CREATED", "RUN KEY"}}
			for _, s := range l.Items {
				t.add(fmt.Sprint(s.ID), s.Status, s.CreatedBy, timestamp(s.CreatedAt), fmt.Sprintf("seed:%s:%d", s.SID, s.ID))
			}
			return p.print(l, t)
		}),
	}
}

func (a *app) soulSeedCommand() *cobra.Command {
	var inputs []string
	var inputFile, remediate, driftEvery string
	cmd := &cobra.Command{
		Use:   "seed SID SCENARIO.yaml",
		Short: "Add a seed to a soul",
		Long: `Add a seed: a scenario the soul carries. It runs, created by you, when the
soul joins (soul join), with its input plus input.sid, the soul's SID; on a
soul that has joined already it runs at once. The scenario is checked first
(exit 3 with every problem). Needs soul.create and run.create.`,
		Example: `  soulctl soul seed db-1.local.test postgres.yaml --input version=16`,
		Args:    exactArgs("SID", "SCENARIO.yaml"),
		RunE: a.action(func(cmd *cobra.Command, args []string, p *printer) error {
			input, err := runInput(inputs, inputFile, cmd.InOrStdin())
			if err != nil {
				return err
			}
			data, err := os.ReadFile(args[1])
			if err != nil {
				return usageErrorf("read %s: %v", filepath.Base(args[1]), err)
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			s, err := c.SeedAdd(cmd.Context(), args[0], client.SeedCreate{Scenario: string(data), Input: input, Remediate: remediate, DriftEvery: driftEvery})
			if err != nil {
				return err
			}
			msg := fmt.Sprintf("seed %d added to %s; it runs when the soul joins\n", s.ID, s.SID)
			if s.RunID != "" {
				msg = fmt.Sprintf("seed %d added to %s; run %s started\n", s.ID, s.SID, s.RunID)
			}
			return p.print(s, text(msg))
		}),
	}
	fs := cmd.Flags()
	fs.StringArrayVar(&inputs, "input", nil, "input key=value; the value is JSON when it parses as JSON, else a string (repeatable)")
	fs.StringVar(&inputFile, "input-file", "", "JSON object with the input (- for stdin); --input keys override it")
	fs.StringVar(&driftEvery, "drift-every", "", "check this seed for drift this often (e.g. 15m; at least 30s) instead of with keeper.yml's drift.every sweep")
	fs.StringVar(&remediate, "remediate", "", "when a drift check finds the soul no longer carries the seed: manual (default) reports it, auto applies the seed again (once per drift episode)")
	return cmd
}

func (a *app) soulApplySeedCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "apply-seed SID SEED-ID",
		Short: "Apply one of a soul's seeds now",
		Long: `Run a seed now, as its creator, under its own run key (seed:SID:ID), as a
join does: a hand-registered soul never joins, so this is how its seeds are
applied. Prints the run (the one the seed's key names, when it ran already).
Needs run.create.`,
		Example: `  soulctl soul apply-seed web-1.example.com 1`,
		Args:    exactArgs("SID", "SEED-ID"),
		RunE: a.action(func(cmd *cobra.Command, args []string, p *printer) error {
			id, err := strconv.ParseInt(args[1], 10, 64)
			if err != nil {
				return usageErrorf("SEED-ID %q is not a number", args[1])
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			r, err := c.SeedApply(cmd.Context(), args[0], id)
			if err != nil {
				return err
			}
			return p.print(r, text(fmt.Sprintf("seed %d of %s: run %s (%s)\n", id, args[0], r.ID, r.Phase)))
		}),
	}
}
