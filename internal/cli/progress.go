package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/soulstack/soulstack/client"
)

// This file turns what the keeper reports about a run into text, with no
// I/O: a run's events into plain lines (eventLine) or into the live view
// of a terminal (progress), and a finished run into its recap. The
// commands only decide where and when to write them.

// The CLI reads runs in client's vocabulary (client.RunEvent.Decode, the
// Phase, StepStatus and TargetStatus constants); it defines no status of
// its own.

// errorText is "code: message", or whichever of them is set.
func errorText(e *client.RunError) string {
	switch {
	case e == nil:
		return ""
	case e.Code == "":
		return e.Message
	case e.Message == "":
		return e.Code
	}
	return e.Code + ": " + e.Message
}

// eventTime formats an event's time for plain lines: UTC, to the
// millisecond.
func eventTime(t time.Time) string {
	return t.UTC().Format("2006-01-02T15:04:05.000Z")
}

// eventLine is one event as a plain line: time, kind, step and SID when
// the event has them, and what happened.
func eventLine(ev client.RunEvent) string {
	detail := compactJSON(ev.Data)
	data, err := ev.Decode()
	if err == nil {
		detail = eventDetail(data)
	}
	fields := []string{eventTime(ev.At), fmt.Sprintf("%-13s", ev.Kind)}
	for _, f := range []string{ev.Step, ev.SID, strings.TrimSpace(detail)} {
		if f != "" {
			fields = append(fields, f)
		}
	}
	return strings.TrimRight(strings.Join(fields, " "), " ")
}

// eventDetail says what an event's data reports, for a plain line.
func eventDetail(data client.EventData) string {
	switch d := data.(type) {
	case client.RunPhaseData:
		if d.Resumed {
			return string(d.Phase) + " (resumed)"
		}
		return string(d.Phase)
	case client.StepStartedData:
		if len(d.Targets) > 0 {
			return d.Module + " on " + strings.Join(d.Targets, ", ")
		}
		return d.Module
	case client.TargetResultData:
		detail := string(d.Status)
		if d.DurationMS > 0 {
			detail += " " + shortDuration(time.Duration(d.DurationMS)*time.Millisecond)
		}
		if d.Attempts > 1 {
			detail += fmt.Sprintf(" after %d attempts", d.Attempts)
		}
		if d.Error != nil {
			detail += " " + errorText(d.Error)
		}
		return detail
	case client.StepFinishedData:
		return string(d.Status)
	case client.StepInterruptedData:
		return d.Module + " was running when the keeper stopped"
	case client.CommandReattachedData:
		if d.Why == "redialled" {
			return "connection cut mid-command: reconnected and reattached to " + d.Command + " (it was not started again)"
		}
		return fmt.Sprintf("resumed (execution %d): reattached to %s over %s (it was not started again)", d.Epoch, d.Command, d.Transport)
	case client.LogData:
		return d.Message
	case client.RunFinishedData:
		if d.Error != nil {
			return string(d.Phase) + " " + errorText(d.Error)
		}
		return string(d.Phase)
	}
	return ""
}

// progress is a run as its events tell it so far: the live view of
// `soulctl run` on a terminal. Feed it events with apply; render it with
// lines.
type progress struct {
	id, name string
	phase    client.Phase
	err      *client.RunError
	start    time.Time // the first event
	end      time.Time // run.finished
	steps    []*stepProgress
}

type stepProgress struct {
	name, module      string
	status            client.StepStatus
	interrupted       bool // step.interrupted: shown as such, its status failed
	started, finished time.Time
	targets           []*targetProgress
}

type targetProgress struct {
	sid    string
	status client.TargetStatus
	err    *client.RunError
}

func newProgress(id, name string) *progress {
	return &progress{id: id, name: name, phase: client.PhasePending}
}

// finished reports whether run.finished was seen.
func (p *progress) finished() bool { return !p.end.IsZero() }

func (p *progress) step(name string, at time.Time) *stepProgress {
	for _, s := range p.steps {
		if s.name == name {
			return s
		}
	}
	s := &stepProgress{name: name, status: client.StepRunning, started: at}
	p.steps = append(p.steps, s)
	return s
}

func (s *stepProgress) target(sid string) *targetProgress {
	for _, t := range s.targets {
		if t.sid == sid {
			return t
		}
	}
	t := &targetProgress{sid: sid}
	s.targets = append(s.targets, t)
	return t
}

// apply takes one event into the view. Events of kinds this client does
// not know, or whose data does not fit their kind, change nothing.
func (p *progress) apply(ev client.RunEvent) {
	if p.start.IsZero() {
		p.start = ev.At
	}
	data, err := ev.Decode()
	if err != nil {
		return
	}
	switch d := data.(type) {
	case client.RunPhaseData:
		p.phase = d.Phase
	case client.StepStartedData:
		s := p.step(ev.Step, ev.At)
		s.started, s.status, s.module = ev.At, client.StepRunning, d.Module
		for _, sid := range d.Targets {
			s.target(sid)
		}
	case client.TargetResultData:
		t := p.step(ev.Step, ev.At).target(ev.SID)
		t.status, t.err = d.Status, d.Error
	case client.StepFinishedData:
		s := p.step(ev.Step, ev.At)
		s.finished, s.status = ev.At, d.Status
	case client.StepInterruptedData:
		s := p.step(ev.Step, ev.At)
		s.finished, s.status, s.interrupted, s.module = ev.At, client.StepFailed, true, d.Module
	case client.RunFinishedData:
		p.end, p.phase, p.err = ev.At, d.Phase, d.Error
	}
}

// counts returns how many targets have each status, and how many have
// reported.
func (s *stepProgress) counts() (map[string]int, int) {
	c := map[string]int{}
	done := 0
	for _, t := range s.targets {
		if t.status.Done() {
			c[string(t.status)]++
			done++
		}
	}
	return c, done
}

// maxFailureLines bounds the error lines shown under one step.
const maxFailureLines = 3

// lines renders the view at now: a header with the run's phase and
// elapsed time, then one line per step with its status, how many targets
// reported, the counts by status, the elapsed time and each host's status,
// and under it the errors of failed hosts. Lines are cut to width
// characters (no limit when width <= 0).
func (p *progress) lines(now time.Time, width int) []string {
	end := now
	if p.finished() {
		end = p.end
	}
	header := fmt.Sprintf("%s %s  %s", firstNonEmpty(p.name, "run"), p.id, p.phase)
	if !p.start.IsZero() {
		header += "  " + shortDuration(end.Sub(p.start))
	}
	if p.err != nil {
		header += "  " + errorText(p.err)
	}
	out := []string{fit(header, width)}
	nameWidth := 0
	for _, s := range p.steps {
		nameWidth = max(nameWidth, utf8.RuneCountInString(s.name))
	}
	for _, s := range p.steps {
		c, done := s.counts()
		status := string(s.status)
		if s.interrupted {
			status = "interrupted"
		}
		var b strings.Builder
		fmt.Fprintf(&b, "  %-*s  %-11s  %d/%d", nameWidth, s.name, status, done, len(s.targets))
		var counts []string
		for _, st := range client.TargetStatuses {
			if n := c[string(st)]; n > 0 {
				counts = append(counts, fmt.Sprintf("%s=%d", st, n))
			}
		}
		if len(counts) > 0 {
			b.WriteString("  " + strings.Join(counts, " "))
		}
		stepEnd := end
		if !s.finished.IsZero() {
			stepEnd = s.finished
		}
		fmt.Fprintf(&b, "  %s", shortDuration(stepEnd.Sub(s.started)))
		hosts := make([]string, len(s.targets))
		for i, t := range s.targets {
			hosts[i] = t.sid + "=" + firstNonEmpty(string(t.status), "…")
		}
		out = append(out, fitList(b.String(), hosts, width))

		var failed []*targetProgress
		for _, t := range s.targets {
			if t.status.Bad() {
				failed = append(failed, t)
			}
		}
		for i, t := range failed {
			if i == maxFailureLines && len(failed) > maxFailureLines+1 {
				out = append(out, fit(fmt.Sprintf("    … and %d more", len(failed)-i), width))
				break
			}
			out = append(out, fit(fmt.Sprintf("    %s %s: %s", t.sid, t.status, firstNonEmpty(errorText(t.err), "no error reported")), width))
		}
	}
	return out
}

// fit cuts s to width characters, ending it with "…" when cut.
func fit(s string, width int) string {
	if width <= 0 || utf8.RuneCountInString(s) <= width {
		return s
	}
	if width == 1 {
		return "…"
	}
	r := []rune(s)
	return string(r[:width-1]) + "…"
}

// fitList appends to prefix as many items as fit in width, then "+N" for
// the ones left out.
func fitList(prefix string, items []string, width int) string {
	line := prefix
	for i, it := range items {
		sep := " "
		if i == 0 {
			sep = "  "
		}
		more := ""
		if rest := len(items) - i - 1; rest > 0 {
			more = fmt.Sprintf(" +%d", rest)
		}
		if width > 0 && utf8.RuneCountInString(line+sep+it+more) > width {
			return fit(fmt.Sprintf("%s%s+%d", line, sep, len(items)-i), width)
		}
		line += sep + it
	}
	return fit(line, width)
}

// shortDuration formats d for people: 0.4s, 12s, 3m05s, 2h10m.
func shortDuration(d time.Duration) string {
	switch {
	case d < 0:
		d = 0
		fallthrough
	case d < 10*time.Second:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Round(time.Second).Seconds()))
	case d < time.Hour:
		d = d.Round(time.Second)
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	d = d.Round(time.Minute)
	return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
}

// runDuration is how long a run took, or has taken until now.
func runDuration(r *client.Run, now time.Time) (time.Duration, bool) {
	if r.StartedAt == nil {
		if r.FinishedAt != nil {
			return r.FinishedAt.Sub(r.CreatedAt), true
		}
		return 0, false
	}
	if r.FinishedAt != nil {
		return r.FinishedAt.Sub(*r.StartedAt), true
	}
	return now.Sub(*r.StartedAt), true
}

// recap is the end of a run for people, like Ansible's PLAY RECAP: the
// phase and duration, the error that ended it, one line per SID counting
// its targets by status, then the run's outputs as indented JSON.
func recap(r *client.Run) string {
	var b strings.Builder
	line := fmt.Sprintf("RECAP %s %s  %s", firstNonEmpty(r.Name, "run"), r.ID, r.Phase)
	if r.FinishedAt != nil {
		d, _ := runDuration(r, *r.FinishedAt)
		line += " in " + shortDuration(d)
	}
	b.WriteString(line + "\n")
	if r.Error != nil {
		fmt.Fprintf(&b, "error: %s\n", errorText(r.Error))
	}

	type tally struct{ ok, changed, failed, skipped, unreachable int }
	bySID := map[string]*tally{}
	for _, s := range r.Steps {
		for _, t := range s.Targets {
			c := bySID[t.SID]
			if c == nil {
				c = &tally{}
				bySID[t.SID] = c
			}
			switch t.Status {
			case client.TargetOK:
				c.ok++
			case client.TargetChanged:
				c.changed++
			case client.TargetFailed:
				c.failed++
			case client.TargetSkipped:
				c.skipped++
			case client.TargetUnreachable:
				c.unreachable++
			}
		}
	}
	sids := make([]string, 0, len(bySID))
	width := 0
	for sid := range bySID {
		sids = append(sids, sid)
		width = max(width, utf8.RuneCountInString(sid))
	}
	sort.Strings(sids)
	for _, sid := range sids {
		c := bySID[sid]
		fmt.Fprintf(&b, "%-*s : ok=%-4d changed=%-4d failed=%-4d skipped=%-4d unreachable=%d\n",
			width, sid, c.ok, c.changed, c.failed, c.skipped, c.unreachable)
	}
	if out := runOutputs(r); out != "" {
		fmt.Fprintf(&b, "\nOutputs:\n%s\n", out)
	}
	return b.String()
}

// runOutputs is the run's outputs indented, or "" when there are none.
// It never shows the message: that is the error when the run did not
// succeed.
func runOutputs(r *client.Run) string {
	doc := []byte(r.Outputs)
	if compactJSON(doc) == "" {
		return ""
	}
	var b bytes.Buffer
	if err := json.Indent(&b, doc, "", "  "); err != nil {
		return string(doc)
	}
	return b.String()
}
