package cli

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/soulstack/soulstack/client"
)

// ExitDrift: with soulctl drift --exit-code, a soul is drifted (and not
// acknowledged), unknown or unreachable.
const ExitDrift = 2

func (a *app) driftCommand() *cobra.Command {
	var state string
	var exitCode bool
	cmd := &cobra.Command{
		Use:   "drift",
		Short: "Show whether souls still carry their seeds; check them, acknowledge drift",
		Long: `Show the fleet's drift: each soul's seeds are checked by check runs (soulctl drift
check, or keeper.yml's drift schedule), and each soul is in_sync, drifted, unknown,
unreachable or checking — its seeds' worst. A drifted seed is corrective when its
last apply succeeded (the soul changed behind the keeper's back) and pending when
it was never applied. REASON says what would change (the check run has the diffs:
soulctl runs get RUN) or why it is unknown.

Exit codes with --exit-code: 0 every soul is in sync (or its drift acknowledged),
2 a soul is drifted, unknown or unreachable, 1 an error.`,
		Example: `  soulctl drift
  soulctl drift --state drifted --exit-code
  soulctl drift check --all
  soulctl drift ack web-1.example.com --until 7d --reason "hotfix, INC-42"`,
		Args: cobra.NoArgs,
		RunE: a.action(func(cmd *cobra.Command, _ []string, p *printer) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			rep, err := driftAll(cmd.Context(), c, state)
			if err != nil {
				return err
			}
			if err := p.print(rep, driftTable(rep.Items)); err != nil {
				return err
			}
			if exitCode && driftPending(rep.Items) {
				return &exitError{code: ExitDrift}
			}
			return nil
		}),
	}
	cmd.Flags().StringVar(&state, "state", "", "only souls with a seed in this state: in_sync, drifted, unknown, unreachable or checking")
	cmd.Flags().BoolVar(&exitCode, "exit-code", false, "exit 2 when a soul is drifted (not acknowledged), unknown or unreachable")
	cmd.AddCommand(a.driftCheckCommand(), a.driftAckCommand(), a.driftCloudCommand())
	return cmd
}

// driftAll reads every page of the drift report.
func driftAll(ctx context.Context, c *client.Client, state string) (*client.DriftReport, error) {
	var all *client.DriftReport
	items, err := listAll(ctx, func(ctx context.Context, o client.ListOptions) ([]client.SoulDrift, string, error) {
		r, err := c.Drift(ctx, state, o)
		if err != nil {
			return nil, "", err
		}
		if all == nil {
			all = r
		}
		return r.Items, r.Next, nil
	})
	if err != nil {
		return nil, err
	}
	if all == nil {
		all = &client.DriftReport{Counts: map[string]int{}}
	}
	all.Items, all.Next = items, ""
	return all, nil
}

// driftPending reports whether a soul is not known to be in sync.
func driftPending(items []client.SoulDrift) bool {
	for _, so := range items {
		switch so.State {
		case client.DriftDrifted:
			if !so.Acknowledged {
				return true
			}
		case client.DriftUnknown, client.DriftUnreachable:
			return true
		}
	}
	return false
}

// driftTable is one line per seed: the soul, its state, the seed's.
func driftTable(items []client.SoulDrift) *table {
	t := &table{header: []string{"SID", "SEED", "STATE", "KIND", "CHECKED", "RUN", "REASON"}}
	for _, so := range items {
		for _, sd := range so.Seeds {
			st := sd.State
			if sd.Acknowledged && sd.State == client.DriftDrifted {
				st += " (acknowledged until " + timestamp(*sd.AckUntil) + ")"
			}
			checked := ""
			if sd.CheckedAt != nil {
				checked = timestamp(*sd.CheckedAt)
			}
			t.add(so.SID, strconv.FormatInt(sd.SeedID, 10), st, sd.Kind, checked, sd.RunID, oneLine(sd.Reason, 100))
		}
	}
	return t
}

// oneLine is s on one line, at most n runes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func (a *app) driftCheckCommand() *cobra.Command {
	var label string
	var all, detach bool
	cmd := &cobra.Command{
		Use:   "check [SID...]",
		Short: "Check souls' seeds for drift (check runs, nothing changes)",
		Long: `Start a check run of every active seed of the souls named (or of those with
--label KEY=VALUE, or --all), as each seed's creator, and wait for them: then
print those souls' drift. Nothing on any soul changes. --detach prints the
check runs and exits.`,
		Example: `  soulctl drift check web-1.example.com
  soulctl drift check --label role=db
  soulctl drift check --all --detach`,
		RunE: a.action(func(cmd *cobra.Command, args []string, p *printer) error {
			if len(args) == 0 && label == "" && !all {
				return usageErrorf("name souls, or give --label KEY=VALUE or --all")
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			started, err := c.DriftChecks(cmd.Context(), client.DriftCheck{SIDs: args, Label: label, All: all})
			if err != nil {
				return err
			}
			for _, sk := range started.Skipped {
				fmt.Fprintf(a.env.Stderr, "%s seed %d not checked: %s\n", sk.SID, sk.SeedID, sk.Reason)
			}
			if detach {
				t := &table{header: []string{"SID", "SEED", "RUN"}}
				for _, ch := range started.Checks {
					t.add(ch.SID, strconv.FormatInt(ch.SeedID, 10), ch.RunID)
				}
				return p.print(started, t)
			}
			var sids []string
			for _, ch := range started.Checks {
				if err := waitDrift(cmd.Context(), c, ch); err != nil {
					return err
				}
				if !slices.Contains(sids, ch.SID) {
					sids = append(sids, ch.SID)
				}
			}
			rep, err := driftAll(cmd.Context(), c, "")
			if err != nil {
				return err
			}
			rep.Items = slices.DeleteFunc(rep.Items, func(so client.SoulDrift) bool { return !slices.Contains(sids, so.SID) })
			return p.print(rep, driftTable(rep.Items))
		}),
	}
	cmd.Flags().StringVar(&label, "label", "", "check the souls whose attribute KEY is VALUE, written KEY=VALUE")
	cmd.Flags().BoolVar(&all, "all", false, "check every soul that has seeds")
	cmd.Flags().BoolVar(&detach, "detach", false, "print the check runs and exit without waiting")
	return cmd
}

// waitDrift waits until the check run has finished and the keeper has
// recorded what it found (its checked_at is the run's end). A record of an
// earlier check that ended in the same second carries the new run's id
// from its start and the earlier end: the comparison is to the
// millisecond, not the second.
func waitDrift(ctx context.Context, c *client.Client, ch client.DriftCheckRun) error {
	run, err := c.RunWait(ctx, ch.RunID)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		so, err := c.DriftOf(ctx, ch.SID)
		if err != nil {
			return err
		}
		if so != nil {
			for _, sd := range so.Seeds {
				if sd.SeedID == ch.SeedID && sd.RunID == ch.RunID && sd.CheckedAt != nil && run.FinishedAt != nil && !sd.CheckedAt.Before(run.FinishedAt.Truncate(time.Millisecond)) {
					return nil
				}
				if sd.SeedID == ch.SeedID && sd.RunID != ch.RunID {
					return nil // a later check took over: its run reports
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("check run %s of %s seed %d finished, but its drift was not recorded within 30 s (soulctl drift shows it when it is)", ch.RunID, ch.SID, ch.SeedID)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (a *app) driftAckCommand() *cobra.Command {
	in := client.DriftAck{}
	cmd := &cobra.Command{
		Use:     "ack SID --until 7d --reason TEXT",
		Short:   "Acknowledge a soul's drift for a while (audited)",
		Example: `  soulctl drift ack web-1.example.com --until 7d --reason 'hotfix INC-42, redeploy Friday'`,
		Long: `Acknowledge the drift of a soul's seeds (one with --seed): it is reported as
acknowledged and raises no notification until its state changes or --until
passes (a duration such as 12h or 7d, or a time in RFC 3339; at most 90 days).
The acknowledgement is audited (soul.drift_acknowledged) with the reason.`,
		Args: exactArgs("SID"),
		RunE: a.action(func(cmd *cobra.Command, args []string, p *printer) error {
			if in.Until == "" || in.Reason == "" {
				return usageErrorf("--until and --reason are required")
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			in.SID = args[0]
			so, err := c.DriftAcknowledge(cmd.Context(), in)
			if err != nil {
				return err
			}
			return p.print(so, driftTable([]client.SoulDrift{*so}))
		}),
	}
	cmd.Flags().Int64Var(&in.SeedID, "seed", 0, "acknowledge this seed only (its id, soulctl soul seeds SID)")
	cmd.Flags().StringVar(&in.Until, "until", "", "how long (12h, 7d) or until when (RFC 3339)")
	cmd.Flags().StringVar(&in.Reason, "reason", "", "why, for the audit log")
	return cmd
}

func (a *app) driftCloudCommand() *cobra.Command {
	var provider string
	var exitCode bool
	cmd := &cobra.Command{
		Use:   "cloud [--provider NAME]",
		Short: "Compare each provider's VMs with the souls the registry holds",
		Example: `  soulctl drift cloud
  soulctl drift cloud --provider hetzner --exit-code`,
		Long: `Ask each provider's driver for its VMs and compare them with the souls the
registry holds for them: a soul whose VM is gone (missing), not running
(stopped) or of another size than it was registered with (resized), and VMs
this deployment made that no soul owns (orphan; soulctl cloud orphans
destroy removes them). --exit-code exits 2 when there is any.`,
		Args: cobra.NoArgs,
		RunE: a.action(func(cmd *cobra.Command, _ []string, p *printer) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			rep, err := c.CloudDriftOf(cmd.Context(), provider)
			if err != nil {
				return err
			}
			t := &table{header: []string{"PROVIDER", "SID", "VM", "DRIFT"}}
			found := 0
			for _, cd := range rep.Providers {
				if !cd.Listable {
					t.add(cd.Provider, "", "", "driver cannot list its VMs")
					continue
				}
				for _, v := range cd.Missing {
					t.add(cd.Provider, v.SID, v.VMID, "missing")
				}
				for _, v := range cd.Stopped {
					t.add(cd.Provider, v.SID, v.VMID, "stopped ("+v.State+")")
				}
				for _, v := range cd.Resized {
					t.add(cd.Provider, v.SID, v.VMID, "resized ("+v.Key+" "+v.Registered+" → "+v.Now+")")
				}
				for _, o := range cd.Orphans {
					t.add(cd.Provider, o.FQDN, o.VMID, "orphan")
				}
				found += len(cd.Missing) + len(cd.Stopped) + len(cd.Resized) + len(cd.Orphans)
			}
			if err := p.print(rep, t); err != nil {
				return err
			}
			if exitCode && found > 0 {
				return &exitError{code: ExitDrift}
			}
			return nil
		}),
	}
	cmd.Flags().StringVar(&provider, "provider", "", "only this provider")
	cmd.Flags().BoolVar(&exitCode, "exit-code", false, "exit 2 when a VM has drifted or is an orphan")
	return cmd
}
