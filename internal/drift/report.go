package drift

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/module"
	"github.com/soulstack/soulstack/internal/store"
)

// MaxAckFor bounds an acknowledgement.
const MaxAckFor = 90 * 24 * time.Hour

// AckUntilError: an acknowledgement's end cannot be read, has passed, or
// lies more than MaxAckFor ahead.
type AckUntilError struct{ Reason string }

func (e *AckUntilError) Error() string { return e.Reason }

// rank orders states from best to worst: a soul shows its seeds' worst.
var rank = map[string]int{store.DriftInSync: 0, store.DriftChecking: 1, store.DriftUnknown: 2, store.DriftUnreachable: 3, store.DriftDrifted: 4}

// ReportParams asks for a page of the fleet's drift.
type ReportParams struct {
	State, SID, After string
	Limit             int
	// Project keeps that project's souls ("" every project's).
	Project string
}

// Report is a page of souls with their seeds' drift, and the counts of
// the project's souls by state.
func (s *Service) Report(ctx context.Context, p ReportParams) (client.DriftReport, error) {
	ds, err := s.store.DriftList(ctx, store.DriftListParams{State: p.State, SID: p.SID, After: p.After, Limit: p.Limit, Project: p.Project})
	if err != nil {
		return client.DriftReport{}, err
	}
	items := bySoul(ds, s.base.Now())
	counts, _, err := s.counts(ctx, p.Project)
	if err != nil {
		return client.DriftReport{}, err
	}
	out := client.DriftReport{Counts: counts, Items: items}
	if len(items) == p.Limit {
		out.Next = items[len(items)-1].SID
	}
	return out, nil
}

// AckParams acknowledges the drift of one seed of a soul (every seed
// when SeedID is 0) until Until: a time (RFC 3339) in the future, a Go
// duration or a number of days (7d) from now.
type AckParams struct {
	SID     string
	SeedID  int64
	Until   string
	Reason  string
	Project string // the caller's ("" keeper-wide): another project's soul is not found
	Actor   store.Actor
}

// Ack acknowledges drift (audit soul.drift_acknowledged) and returns the
// soul's drift after it.
func (s *Service) Ack(ctx context.Context, p AckParams) (client.SoulDrift, error) {
	now := s.base.Now()
	until, err := parseAckUntil(p.Until, now)
	if err != nil {
		return client.SoulDrift{}, &AckUntilError{Reason: err.Error()}
	}
	if until.Sub(now) > MaxAckFor {
		return client.SoulDrift{}, &AckUntilError{Reason: p.Until + " is more than 90 days ahead"}
	}
	notFound := &store.Error{Err: store.ErrNotFound, Kind: "drift", Key: p.SID}
	if so, err := s.store.SoulGet(ctx, p.SID); err == nil && !module.Visible(so.Project, nil, p.Project) {
		return client.SoulDrift{}, notFound
	}
	if _, err := s.store.DriftAck(ctx, store.DriftAckParams{SID: p.SID, SeedID: p.SeedID, Until: until, Reason: p.Reason, Actor: p.Actor}); err != nil {
		return client.SoulDrift{}, err
	}
	ds, err := s.store.DriftList(ctx, store.DriftListParams{SID: p.SID, Limit: 1})
	if err != nil {
		return client.SoulDrift{}, err
	}
	items := bySoul(ds, s.base.Now())
	if len(items) == 0 || items[0].SID != p.SID {
		return client.SoulDrift{}, notFound
	}
	return items[0], nil
}

// bySoul groups the seeds' drift by soul.
func bySoul(ds []store.SoulDrift, now time.Time) []client.SoulDrift {
	out := []client.SoulDrift{}
	for _, d := range ds {
		if len(out) == 0 || out[len(out)-1].SID != d.SID {
			out = append(out, client.SoulDrift{SID: d.SID, State: store.DriftInSync, Acknowledged: true, Seeds: []client.SeedDrift{}})
		}
		so := &out[len(out)-1]
		sd := client.SeedDrift{SeedID: d.SeedID, State: d.State, Kind: d.Kind, RunID: d.RunID, Reason: d.Reason, CheckedAt: d.CheckedAt,
			ChangedAt: d.ChangedAt, Acknowledged: d.Acknowledged(now), AckReason: d.AckReason, AckBy: d.AckBy, RemediationRunID: d.RemediationRunID}
		if sd.Acknowledged {
			sd.AckUntil = d.AckUntil
		}
		so.Seeds = append(so.Seeds, sd)
		if rank[d.State] > rank[so.State] {
			so.State = d.State
		}
		if d.State == store.DriftDrifted && !sd.Acknowledged {
			so.Acknowledged = false
		}
	}
	for i := range out {
		if out[i].State != store.DriftDrifted {
			out[i].Acknowledged = false
		}
	}
	return out
}

// parseAckUntil reads an acknowledgement's end: a time (RFC 3339) in the
// future, or a Go duration or a number of days (7d) from now.
func parseAckUntil(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		if !t.After(now) {
			return time.Time{}, fmt.Errorf("%s has passed", s)
		}
		return t, nil
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n <= 0 {
			return time.Time{}, fmt.Errorf("%q is not a number of days", s)
		}
		return now.Add(time.Duration(n) * 24 * time.Hour), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return time.Time{}, fmt.Errorf("%q is not a time (RFC 3339) or a duration such as 12h or 7d", s)
	}
	return now.Add(d), nil
}

// counts counts the souls of project (every project's for "") by their
// seeds' worst state, and how many of the drifted ones are acknowledged.
func (s *Service) counts(ctx context.Context, project string) (map[string]int, int, error) {
	counts, acked := map[string]int{}, 0
	after := ""
	for {
		ds, err := s.store.DriftList(ctx, store.DriftListParams{After: after, Limit: 500, Project: project})
		if err != nil {
			return nil, 0, err
		}
		souls := bySoul(ds, s.base.Now())
		for _, so := range souls {
			counts[so.State]++
			if so.Acknowledged {
				acked++
			}
		}
		if len(souls) < 500 {
			return counts, acked, nil
		}
		after = souls[len(souls)-1].SID
	}
}

// gauge is the drift gauge: each project's souls by their seeds' worst
// state.
var gauge = prometheus.NewDesc("soulstack_souls_drift",
	"Souls by project and drift state (their seeds' worst; acknowledged drift counts as drifted_acknowledged).", []string{"project", "state"}, nil)

// Collector is the drift gauge for a Prometheus registry: it reads the
// counts at each scrape, bounded in time.
func (s *Service) Collector() prometheus.Collector { return collector{s} }

type collector struct{ s *Service }

func (c collector) Describe(ch chan<- *prometheus.Desc) { ch <- gauge }

func (c collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	after := ""
	for {
		projects, err := c.s.store.ProjectList(ctx, store.ListParams{Limit: 500, After: after})
		if err != nil {
			c.s.base.Log.Warn("drift metrics", "err", err)
			return
		}
		for _, p := range projects {
			counts, acked, err := c.s.counts(ctx, p.Name)
			if err != nil {
				c.s.base.Log.Warn("drift metrics", "project", p.Name, "err", err)
				return
			}
			counts[store.DriftDrifted] -= acked
			counts["drifted_acknowledged"] = acked
			for _, st := range []string{store.DriftInSync, store.DriftDrifted, "drifted_acknowledged", store.DriftUnknown, store.DriftUnreachable, store.DriftChecking} {
				ch <- prometheus.MustNewConstMetric(gauge, prometheus.GaugeValue, float64(counts[st]), p.Name, st)
			}
		}
		if len(projects) < 500 {
			return
		}
		after = projects[len(projects)-1].Name
	}
}
