package cli

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/soulstack/soulstack/client"
)

func (a *app) auditCommand() *cobra.Command {
	return group("audit", "Read and verify the hash-chained audit log",
		a.auditListCommand(),
		a.auditVerifyCommand(),
	)
}

func (a *app) auditListCommand() *cobra.Command {
	var limit int
	var after int64
	var all bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List audit events in sequence order",
		Long: `List audit events in sequence order, one page of at most --limit events
after sequence number --after. With --all, follow the pages to the end of the
log (--limit is then the page size).`,
		Example: `  soulctl audit list --limit 20
  soulctl audit list --after 120 --all -o json`,
		Args: cobra.NoArgs,
		RunE: a.action(func(cmd *cobra.Command, _ []string, p *printer) error {
			if limit < 0 {
				return usageErrorf("--limit: must not be negative")
			}
			if after < 0 {
				return usageErrorf("--after: must not be negative")
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			o := client.AuditListOptions{ListOptions: client.ListOptions{Limit: limit}}
			if after > 0 {
				o.After = strconv.FormatInt(after, 10)
			}
			out := client.AuditList{Items: []client.AuditEvent{}}
			for {
				l, err := c.AuditList(cmd.Context(), o)
				if err != nil {
					return err
				}
				out.Items = append(out.Items, l.Items...)
				out.Next = l.Next
				if !all || l.Next == "" {
					break
				}
				if l.Next == o.After {
					return fmt.Errorf("list audit events: the keeper returned the cursor %q twice", l.Next)
				}
				o.After = l.Next
			}
			t := &table{header: []string{"SEQ", "AT", "ACTOR", "ACTION", "OBJECT"}}
			for _, e := range out.Items {
				t.add(strconv.FormatInt(e.Seq, 10), timestamp(e.At), e.ActorAID, e.Action, e.Object)
			}
			if err := p.print(out, t); err != nil {
				return err
			}
			if out.Next != "" && !p.json {
				fmt.Fprintf(cmd.ErrOrStderr(), "more events follow: soulctl audit list --after %s (or --all)\n", out.Next)
			}
			return nil
		}),
	}
	fs := cmd.Flags()
	fs.IntVar(&limit, "limit", 0, "at most this many events per page (default: the keeper's, 100)")
	fs.Int64Var(&after, "after", 0, "list events after this sequence number")
	fs.BoolVar(&all, "all", false, "follow the pages to the end of the log")
	return cmd
}

func (a *app) auditVerifyCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "verify",
		Short:   "Verify the audit hash chain; exit 1 when it is broken",
		Example: `  soulctl audit verify`,
		Long: `Ask the keeper to verify the whole audit log: every row's HMAC under the
audit key and its link to the row before, the chain head, and the head
against the keeper's signed checkpoints. Prints OK with the number of events
checked, or one line per problem ("row N: code: message") and exits 1. The
codes are audit.row_tampered, audit.rows_missing, audit.relinked,
audit.head_mismatch, audit.truncated, audit.emptied, audit.unkeyed,
audit.checkpoint_mismatch and audit.checkpoint_invalid.`,
		Args: cobra.NoArgs,
		RunE: a.action(func(cmd *cobra.Command, _ []string, p *printer) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			l, err := c.AuditList(cmd.Context(), client.AuditListOptions{ListOptions: client.ListOptions{Limit: 1}, Verify: true})
			if err != nil {
				return err
			}
			r := l.Verify
			if r == nil {
				return errors.New("verify audit chain: the keeper answered without a verification report")
			}
			if err := p.print(r, auditReportText(r)); err != nil {
				return err
			}
			if !r.OK {
				return fmt.Errorf("audit chain is broken: %d problem(s) in %d events", len(r.Problems), r.Checked)
			}
			return nil
		}),
	}
}

func auditReportText(r *client.AuditReport) text {
	var b strings.Builder
	for _, pr := range r.Problems {
		fmt.Fprintf(&b, "row %d: %s: %s\n", pr.Seq, pr.Kind, pr.Message)
	}
	if r.OK {
		fmt.Fprintf(&b, "audit chain OK: %d events checked, head at seq %d, %d signed checkpoint(s)\n", r.Checked, r.HeadSeq, r.Checkpoints)
	}
	if r.Legacy > 0 {
		fmt.Fprintf(&b, "rows 1..%d are legacy rows (plain SHA-256, written before the audit key): the keyed rows after them cover them as they were at the upgrade, but changes made before it cannot be detected\n", r.Legacy)
	}
	if r.Checkpoints == 0 {
		b.WriteString("no signed checkpoint was checked: rows removed from the end of the log cannot be noticed\n")
	}
	return text(b.String())
}
