package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/soulstack/soulstack/client"
)

func (a *app) runsCommand() *cobra.Command {
	return group("runs", "Inspect, follow, wait for, cancel, approve and reject runs",
		a.runsListCommand(),
		a.runsGetCommand(),
		a.runsLogsCommand(),
		a.runsWaitCommand(),
		a.runsCancelCommand(),
		a.runsOutputCommand(),
		a.runsDecideCommand(true),
		a.runsDecideCommand(false),
	)
}

// runsDecideCommand is runs approve (approve) or runs reject.
func (a *app) runsDecideCommand(approve bool) *cobra.Command {
	verb, short := "reject", "Reject the step a run waits on: the run ends Rejected"
	if approve {
		verb, short = "approve", "Approve the step a run waits on: the run goes on"
	}
	var reason string
	cmd := &cobra.Command{
		Use:     verb + " ID --reason TEXT",
		Short:   short,
		Example: "  soulctl runs " + verb + " run_0123456789abcdef --reason 'change ticket CHG-42'",
		Long: short + `. A run waits (phase AwaitingApproval) when an approval
policy holds one of its steps; another person than its creator, with
run.approve in its project, decides. The reason is kept with the run and in
the audit log.`,
		Args: exactArgs("ID"),
		RunE: a.action(func(cmd *cobra.Command, args []string, p *printer) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			decide := c.RunReject
			if approve {
				decide = c.RunApprove
			}
			r, err := decide(cmd.Context(), args[0], reason)
			if err != nil {
				return err
			}
			return p.print(r, text(fmt.Sprintf("run %s: %sd; it is %s\n", r.ID, verb, r.Phase)))
		}),
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why (required)")
	_ = cmd.MarkFlagRequired("reason")
	return cmd
}

// runPhases are the phases runs list --phase accepts.
var runPhases = []client.Phase{client.PhasePending, client.PhaseAwaitingApproval, client.PhaseRunning,
	client.PhaseSucceeded, client.PhaseFailed, client.PhaseCancelled, client.PhaseRejected}

func (a *app) runsListCommand() *cobra.Command {
	var limit int
	var phase, name, since string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List runs, newest first",
		Long: `List runs, newest first: all of them, or the newest --limit, only those in
one --phase, or those whose scenario name contains --name (ignoring case).
The keeper filters; soulctl fetches only the pages it needs.`,
		Example: `  soulctl runs list --phase Failed --limit 5
  soulctl runs list --name spawn --since 24h -o json`,
		Args: cobra.NoArgs,
		RunE: a.action(func(cmd *cobra.Command, _ []string, p *printer) error {
			if limit < 0 {
				return usageErrorf("--limit: must be 0 (all) or more")
			}
			var ph client.Phase
			if phase != "" {
				for _, known := range runPhases {
					if strings.EqualFold(phase, string(known)) {
						ph = known
					}
				}
				if ph == "" {
					names := make([]string, len(runPhases))
					for i, known := range runPhases {
						names[i] = string(known)
					}
					return usageErrorf("--phase: %q is not a run phase (%s)", phase, strings.Join(names, ", "))
				}
			}
			sinceT, err := parseSince(since, time.Now())
			if err != nil {
				return err
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			items, err := listUpTo(cmd.Context(), limit, func(ctx context.Context, o client.ListOptions) ([]client.Run, string, error) {
				l, err := c.RunList(ctx, client.RunListOptions{ListOptions: o, Phase: ph, Name: name, Since: sinceT})
				if err != nil {
					return nil, "", err
				}
				return l.Items, l.Next, nil
			})
			if err != nil {
				return err
			}
			now := time.Now()
			t := &table{header: []string{"ID", "NAME", "PHASE", "CREATED", "DURATION"}}
			for _, r := range items {
				t.add(r.ID, r.Name, string(r.Phase), timestamp(r.CreatedAt), durationCell(&r, now))
			}
			return p.print(client.RunList{Items: items}, t)
		}),
	}
	cmd.Flags().IntVar(&limit, "limit", 0, "at most this many runs, the newest (0: all)")
	cmd.Flags().StringVar(&phase, "phase", "", "only runs in this phase (Pending, AwaitingApproval, Running, Succeeded, Failed, Cancelled, Rejected)")
	cmd.Flags().StringVar(&name, "name", "", "only runs whose scenario name contains this text (ignoring case)")
	cmd.Flags().StringVar(&since, "since", "", "only runs created since this long ago (24h, 90m) or this time (RFC 3339, 2026-12-01T00:00:00Z)")
	return cmd
}

func (a *app) runsGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "get ID",
		Short:   "Show a run with its steps, targets and outputs",
		Example: `  soulctl runs get run_0123456789abcdef -o json`,
		Args:    exactArgs("ID"),
		RunE: a.action(func(cmd *cobra.Command, args []string, p *printer) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			r, err := c.RunGet(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return p.print(r, runView{r: r, now: time.Now()})
		}),
	}
}

func (a *app) runsLogsCommand() *cobra.Command {
	var follow bool
	cmd := &cobra.Command{
		Use:     "logs ID",
		Short:   "Print a run's events",
		Example: `  soulctl runs logs run_0123456789abcdef --follow`,
		Long: `Print a run's events, one plain line each: time, kind, step, SID and what
happened. Without --follow it prints the events recorded so far; with --follow
it goes on until the run has finished. With -o json each event is one line of
JSON.`,
		Args: exactArgs("ID"),
		RunE: a.action(func(cmd *cobra.Command, args []string, p *printer) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if !follow {
				r, err := c.RunGet(ctx, args[0])
				if err != nil {
					return err
				}
				if !client.Terminal(r.Phase) {
					var stop context.CancelFunc
					ctx, stop = context.WithCancel(ctx)
					defer stop()
					idle := newIdleTimer(logsIdle, stop)
					defer idle.stop()
					return ignoreCancel(cmd.Context(), streamEvents(ctx, c, args[0], p, idle.reset))
				}
			}
			return streamEvents(ctx, c, args[0], p, func() {})
		}),
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing events until the run has finished")
	return cmd
}

// logsIdle is how long `runs logs` without --follow waits for more events
// of a run that is still going before it stops: the keeper sends the
// events recorded so far at once.
const logsIdle = 700 * time.Millisecond

// streamEvents prints a run's events as plain lines, or as JSON lines,
// calling seen after each.
func streamEvents(ctx context.Context, c *client.Client, id string, p *printer, seen func()) error {
	return c.RunEvents(ctx, id, 0, func(ev client.RunEvent) error {
		seen()
		if p.json {
			b, err := json.Marshal(ev)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(p.w, "%s\n", b)
			return err
		}
		_, err := fmt.Fprintln(p.w, eventLine(ev))
		return err
	})
}

// ignoreCancel drops the cancellation that ended a stream on purpose,
// while parent is still live.
func ignoreCancel(parent context.Context, err error) error {
	if errors.Is(err, context.Canceled) && parent.Err() == nil {
		return nil
	}
	return err
}

// idleTimer calls fire once no reset came for d.
type idleTimer struct {
	mu sync.Mutex
	t  *time.Timer
	d  time.Duration
}

func newIdleTimer(d time.Duration, fire func()) *idleTimer {
	return &idleTimer{t: time.AfterFunc(d, fire), d: d}
}

func (i *idleTimer) reset() {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.t.Reset(i.d)
}

func (i *idleTimer) stop() { i.t.Stop() }

func (a *app) runsWaitCommand() *cobra.Command {
	var timeout string
	cmd := &cobra.Command{
		Use:     "wait ID",
		Short:   "Wait until a run has finished and print its recap",
		Example: `  soulctl runs wait run_0123456789abcdef --timeout 30m`,
		Long: `Wait until a run has finished and print its recap (with -o json, the run).
Exit codes as for soulctl run: 0 when it Succeeded, 2 when it Failed or was
Cancelled, 3 when --timeout passed first (the run goes on), 1 on other errors.`,
		Args: exactArgs("ID"),
		RunE: a.action(func(cmd *cobra.Command, args []string, p *printer) error {
			var wait time.Duration
			if timeout != "" {
				var err error
				if wait, err = duration("timeout", timeout); err != nil {
					return err
				}
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			r, err := c.RunGet(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return a.waitRun(cmd.Context(), c, r, p, wait, "--timeout", false, checkOptions{})
		}),
	}
	cmd.Flags().StringVar(&timeout, "timeout", "", "stop waiting after this long and exit 3 (default: wait until the run ends)")
	return cmd
}

func (a *app) runsCancelCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "cancel ID",
		Short:   "Cancel a run",
		Example: `  soulctl runs cancel run_0123456789abcdef`,
		Long: `Cancel a run: a Pending run is cancelled at once, a Running one stops at its
next check, within seconds (soulctl runs wait ID waits for that).`,
		Args: exactArgs("ID"),
		RunE: a.action(func(cmd *cobra.Command, args []string, p *printer) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			r, err := c.RunCancel(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			msg := fmt.Sprintf("run %s cancelled\n", r.ID)
			if !client.Terminal(r.Phase) {
				msg = fmt.Sprintf("run %s: cancel requested; it is %s and stops within seconds\n", r.ID, r.Phase)
			}
			return p.print(r, text(msg))
		}),
	}
}

// durationCell is how long a run took; for a run still going, how long so
// far with a "+"; empty for a run that has not started.
func durationCell(r *client.Run, now time.Time) string {
	d, ok := runDuration(r, now)
	switch {
	case !ok:
		return ""
	case r.FinishedAt == nil:
		return shortDuration(d) + "+"
	}
	return shortDuration(d)
}

// runView is a run for people: its fields, a table of its steps' targets
// and its outputs.
type runView struct {
	r   *client.Run
	now time.Time
}

func (v runView) render(w io.Writer) error {
	r := v.r
	rec := record{
		{"ID", r.ID},
		{"Name", r.Name},
		{"Phase", string(r.Phase)},
		{"Key", r.Key},
		{"Created", timestamp(r.CreatedAt)},
		{"Created by", r.CreatedBy},
		{"Started", timePtr(r.StartedAt)},
		{"Finished", timePtr(r.FinishedAt)},
		{"Duration", durationCell(r, v.now)},
		{"Timeout", r.Timeout},
		{"Error", errorText(r.Error)},
		{"Input", compactJSON(r.Input)},
	}
	if err := rec.render(w); err != nil {
		return err
	}
	if len(r.Steps) > 0 {
		fmt.Fprintln(w)
		t := &table{header: []string{"STEP", "MODULE", "SID", "STATUS", "CHANGED", "ATTEMPTS", "DURATION", "ERROR"}}
		for _, s := range r.Steps {
			if len(s.Targets) == 0 {
				t.add(s.Name, s.Module, "", string(s.Status), "", "", "", "")
			}
			for _, tg := range s.Targets {
				attempts := ""
				if tg.Attempts > 0 {
					attempts = strconv.Itoa(tg.Attempts)
				}
				t.add(s.Name, s.Module, tg.SID, string(tg.Status), yesNo(tg.Changed), attempts,
					shortDuration(time.Duration(tg.DurationMS)*time.Millisecond), errorText(tg.Error))
			}
		}
		if err := t.render(w); err != nil {
			return err
		}
	}
	if out := runOutputs(r); out != "" {
		_, err := fmt.Fprintf(w, "\nOutputs:\n%s\n", strings.TrimRight(out, "\n"))
		return err
	}
	return nil
}

func timePtr(t *time.Time) string {
	if t == nil {
		return ""
	}
	return timestamp(*t)
}

// parseSince reads --since: a duration back from now (24h, 90m) or an
// RFC 3339 time; the zero time when empty.
func parseSince(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return time.Time{}, usageErrorf("--since: %q must be a positive duration", s)
		}
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, usageErrorf("--since: %q is neither a duration (24h, 90m) nor an RFC 3339 time (2026-12-01T00:00:00Z)", s)
	}
	return t, nil
}
