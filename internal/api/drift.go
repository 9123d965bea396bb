package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/auth"
	"github.com/soulstack/soulstack/internal/runner"
	"github.com/soulstack/soulstack/internal/store"
)

// Drift: a soul's seeds are what it should carry. A drift check runs each
// active seed of a soul as a check run (as its creator, whose permissions
// are checked again then, as for the seed's own run) and, when that run
// finishes (DriftFinished), records per soul and seed what it found.

// driftKeyPrefix starts the key of a drift check run:
// drift:<sid>:<seed id>:<nonce>.
const driftKeyPrefix = "drift:"

// maxAckFor bounds an acknowledgement.
const maxAckFor = 90 * 24 * time.Hour

// driftRank orders states from best to worst: a soul shows its seeds'
// worst.
var driftRank = map[string]int{store.DriftInSync: 0, store.DriftChecking: 1, store.DriftUnknown: 2, store.DriftUnreachable: 3, store.DriftDrifted: 4}

// DriftCheck starts a check run of every active seed of the souls sids
// (all souls with seeds when all is set) and returns them.
func (s *Server) DriftCheck(ctx context.Context, sids []string, all bool, label *store.Label) (client.DriftCheckStarted, error) {
	return s.driftCheck(ctx, sids, all, label, nil)
}

// driftCheck is DriftCheck for the seeds keep accepts (all when nil).
func (s *Server) driftCheck(ctx context.Context, sids []string, all bool, label *store.Label, keep func(store.SoulSeed) bool) (client.DriftCheckStarted, error) {
	out := client.DriftCheckStarted{Checks: []client.DriftCheckRun{}, Skipped: []client.DriftSkipped{}}
	if all || label != nil {
		after := ""
		for {
			page, err := s.store.SoulSearch(ctx, store.SoulListParams{ListParams: store.ListParams{After: after, Limit: 500, Project: scopeOf(ctx)}, Label: label})
			if err != nil {
				return out, err
			}
			for _, so := range page {
				sids = append(sids, so.SID)
			}
			if len(page) < 500 {
				break
			}
			after = page[len(page)-1].SID
		}
	}
	for _, sid := range sids {
		so, err := s.soulOf(ctx, sid)
		if err != nil {
			return out, err
		}
		if so.Status == store.SoulDestroyed {
			continue
		}
		seeds, err := s.store.Seeds(ctx, sid)
		if err != nil {
			return out, err
		}
		for _, sd := range seeds {
			if sd.Status != store.SeedActive || keep != nil && !keep(sd) {
				continue
			}
			key := fmt.Sprintf("%s%s:%d:%d", driftKeyPrefix, sid, sd.ID, s.now().UnixNano())
			run, err := s.submitSeedAs(ctx, sd, client.RunCheck, key)
			if err != nil {
				out.Skipped = append(out.Skipped, client.DriftSkipped{SID: sid, SeedID: sd.ID, Reason: err.Error()})
				continue
			}
			if err := s.store.DriftStart(ctx, sid, sd.ID, run.ID); err != nil {
				return out, err
			}
			out.Checks = append(out.Checks, client.DriftCheckRun{SID: sid, SeedID: sd.ID, RunID: run.ID})
		}
	}
	return out, nil
}

// DriftSweep checks every seed without a schedule of its own: the
// keeper-wide periodic drift check (drift.every).
func (s *Server) DriftSweep(ctx context.Context) error {
	started, err := s.driftCheck(ctx, nil, true, nil, func(sd store.SoulSeed) bool { return sd.DriftEvery == 0 })
	s.log.Info("drift sweep", "checks", len(started.Checks), "skipped", len(started.Skipped), "err", err)
	return err
}

// DriftDue checks the seeds with a schedule of their own that are due.
func (s *Server) DriftDue(ctx context.Context) error {
	due, err := s.store.DriftDue(ctx, s.now())
	if err != nil || len(due) == 0 {
		return err
	}
	want := map[string]map[int64]bool{}
	var sids []string
	for _, sd := range due {
		if want[sd.SID] == nil {
			want[sd.SID] = map[int64]bool{}
			sids = append(sids, sd.SID)
		}
		want[sd.SID][sd.ID] = true
	}
	started, err := s.driftCheck(ctx, sids, false, nil, func(sd store.SoulSeed) bool { return want[sd.SID][sd.ID] })
	s.log.Info("drift checks due", "checks", len(started.Checks), "skipped", len(started.Skipped), "err", err)
	return err
}

// parseDriftKey reads a drift check run's key.
func parseDriftKey(key string) (sid string, seedID int64, ok bool) {
	rest, ok := strings.CutPrefix(key, driftKeyPrefix)
	if !ok {
		return "", 0, false
	}
	parts := strings.Split(rest, ":")
	if len(parts) != 3 {
		return "", 0, false
	}
	id, err := strconv.ParseInt(parts[1], 10, 64)
	return parts[0], id, err == nil
}

// DriftFinished records what a finished drift check run found; other runs
// are ignored. The runner calls it once a run has finished.
func (s *Server) DriftFinished(ctx context.Context, run store.Run) {
	sid, seedID, ok := parseDriftKey(run.Key)
	if !ok || run.Mode != string(client.RunCheck) {
		return
	}
	d, err := s.driftOf(ctx, run, sid, seedID)
	before := ""
	if err == nil {
		before, err = s.store.DriftRecord(ctx, store.DriftRecordParams{Drift: d, Actor: store.Actor(run.CreatedBy)})
	}
	if errors.Is(err, store.ErrNotFound) {
		// Not the check the seed waits for: a later one was started, or
		// the drift service never started this run (a key is no proof).
		s.log.Info("drift check run not recorded", "sid", sid, "seed", seedID, "run", run.ID, "reason", err)
		return
	}
	if err != nil {
		s.log.Error("record drift", "sid", sid, "seed", seedID, "run", run.ID, "err", err)
		return
	}
	if d.State == store.DriftDrifted && before != store.DriftDrifted {
		s.remediate(ctx, run, sid, seedID)
	}
	if s.notify != nil && d.State != before {
		data := map[string]any{"sid": sid, "seed_id": seedID, "state": d.State, "from": before, "kind": d.Kind, "reason": d.Reason, "run_id": run.ID}
		switch {
		case d.State == store.DriftDrifted:
			s.notify(ctx, run.Project, "soul.drifted", "soul/"+sid, data)
		case d.State == store.DriftInSync && before != store.DriftChecking:
			s.notify(ctx, run.Project, "soul.in_sync", "soul/"+sid, data)
		}
	}
}

// remediate starts, for a seed with remediate: auto that a check found
// drifted at the start of a drift episode (it was not drifted before), an
// apply run of the seed as its creator — once per episode: its key is the
// check run's, and a seed that stays drifted is not applied again.
func (s *Server) remediate(ctx context.Context, check store.Run, sid string, seedID int64) {
	seeds, err := s.store.Seeds(ctx, sid)
	if err != nil {
		s.log.Error("remediate drift", "sid", sid, "seed", seedID, "err", err)
		return
	}
	for _, sd := range seeds {
		if sd.ID != seedID || sd.Remediate != store.SeedRemediateAuto || sd.Status != store.SeedActive {
			continue
		}
		run, err := s.submitSeedAs(ctx, sd, client.RunApply, "remediate:"+check.ID)
		if err == nil {
			err = s.store.DriftRemediated(ctx, sid, seedID, check.ID, run.ID, store.Actor(sd.CreatedBy))
		}
		if err != nil {
			s.log.Error("remediate drift", "sid", sid, "seed", seedID, "check_run", check.ID, "err", err)
		}
	}
}

// driftOf judges a finished check run of a seed on sid: unreachable when
// the soul could not be reached, drifted when a target would change,
// unknown when one is unknown or the check failed, in sync otherwise.
func (s *Server) driftOf(ctx context.Context, run store.Run, sid string, seedID int64) (store.SoulDrift, error) {
	d := store.SoulDrift{SID: sid, SeedID: seedID, RunID: run.ID, CheckedAt: run.FinishedAt}
	steps, targets, err := s.store.RunSteps(ctx, run.ID)
	if err != nil {
		return d, err
	}
	names := map[int]string{}
	for _, st := range steps {
		names[st.Index] = st.Name
		if st.Status == string(client.StepUnknown) && d.State == "" {
			d.State, d.Reason = store.DriftUnknown, "step "+st.Name+": its hosts are known only after an apply"
		}
	}
	var would, unknown, unreachable, failed []string
	for _, t := range targets {
		where := names[t.StepIndex]
		switch client.TargetStatus(t.Status) {
		case client.TargetWouldChange:
			would = append(would, where)
		case client.TargetUnknown:
			unknown = append(unknown, where+": "+t.Unknown)
		case client.TargetUnreachable:
			unreachable = append(unreachable, where+": "+t.ErrorCode+": "+t.ErrorMsg)
		case client.TargetFailed:
			failed = append(failed, where+": "+t.ErrorCode+": "+t.ErrorMsg)
		}
	}
	switch {
	case len(unreachable) > 0:
		d.State, d.Reason = store.DriftUnreachable, unreachable[0]
	case len(would) > 0:
		d.State, d.Reason = store.DriftDrifted, "would change: "+strings.Join(would, ", ")
		d.Kind = store.DriftPending
		applied, err := s.store.RunByKey(ctx, run.CreatedBy, SeedRunKey(sid, seedID))
		if err == nil && applied.Phase == store.PhaseSucceeded {
			d.Kind = store.DriftCorrective
		} else if err != nil && !errors.Is(err, store.ErrNotFound) {
			return d, err
		}
	case len(failed) > 0 || run.Phase != store.PhaseSucceeded:
		why := run.ErrorCode + ": " + run.ErrorMsg
		if len(failed) > 0 {
			why = failed[0]
		}
		d.State, d.Reason = store.DriftUnknown, "the check failed: "+why
	case len(unknown) > 0:
		d.State, d.Reason = store.DriftUnknown, unknown[0]
	case d.State == "":
		d.State = store.DriftInSync
	}
	if len(d.Reason) > 1000 {
		d.Reason = d.Reason[:1000] + "…"
	}
	return d, nil
}

// driftWire groups the seeds' drift by soul.
func driftWire(ds []store.SoulDrift, now time.Time) []client.SoulDrift {
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
		if driftRank[d.State] > driftRank[so.State] {
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

var driftTags = []string{"drift"}

func (s *Server) registerDrift() {
	if s.runs == nil || s.check == nil {
		return
	}
	register(s, huma.Operation{
		OperationID: "drift-check", Method: http.MethodPost, Path: "/v1/drift/checks", Tags: driftTags,
		Summary: "Check souls for drift",
		Description: "Starts a check run (mode check) of every active seed of the souls named, of those with a label, or of all: " +
			"each runs as its seed's creator, whose run.create (and cloud permissions) are checked again now. When a check run " +
			"finishes, the soul's seed is in_sync, drifted (corrective: its last apply succeeded; pending: never applied), unknown " +
			"or unreachable in GET /v1/drift; a change of state is audited (soul.drifted, soul.in_sync…). Seeds that could not be " +
			"checked are listed with the reason.",
		Errors: []int{http.StatusNotFound, http.StatusUnprocessableEntity},
	}, auth.DriftCheck, false, func(ctx context.Context, in *struct{ Body client.DriftCheck }) (*struct{ Body client.DriftCheckStarted }, error) {
		b := in.Body
		var label *store.Label
		if b.Label != "" {
			k, v, ok := strings.Cut(b.Label, "=")
			if !ok || k == "" {
				return nil, invalid("drift.label_invalid", "body.label", "want key=value, got %q", b.Label)
			}
			label = &store.Label{Key: k, Value: v}
		}
		if len(b.SIDs) == 0 && !b.All && label == nil {
			return nil, invalid("drift.target_missing", "body", "name souls (sids), a label, or all")
		}
		started, err := s.DriftCheck(ctx, b.SIDs, b.All, label)
		if err != nil {
			return nil, err
		}
		return &struct{ Body client.DriftCheckStarted }{Body: started}, nil
	})

	register(s, huma.Operation{
		OperationID: "drift-report", Method: http.MethodGet, Path: "/v1/drift", Tags: driftTags,
		Summary: "The fleet's drift",
		Description: "Counts of souls by drift state (their seeds' worst: drifted, unreachable, unknown, checking, in_sync) and a " +
			"page of souls, each with its seeds' state, kind, reason, last check run and acknowledgement. Paged by SID like souls.",
	}, auth.SoulRead, false, func(ctx context.Context, in *struct {
		State string `query:"state" enum:"checking,in_sync,drifted,unknown,unreachable" required:"false" doc:"Only souls with a seed in this state."`
		SID   string `query:"sid" required:"false" doc:"Only this soul."`
		Limit int    `query:"limit" minimum:"0" maximum:"500" required:"false"`
		After string `query:"after" required:"false"`
	}) (*struct{ Body client.DriftReport }, error) {
		limit := in.Limit
		if limit == 0 {
			limit = 100
		}
		ds, err := s.store.DriftList(ctx, store.DriftListParams{State: in.State, SID: in.SID, After: in.After, Limit: limit, Project: scopeOf(ctx)})
		if err != nil {
			return nil, err
		}
		items := driftWire(ds, s.now())
		counts, _, err := s.driftSoulCounts(ctx, scopeOf(ctx))
		if err != nil {
			return nil, err
		}
		out := client.DriftReport{Counts: counts, Items: items}
		if len(items) == limit {
			out.Next = items[len(items)-1].SID
		}
		return &struct{ Body client.DriftReport }{Body: out}, nil
	})

	register(s, huma.Operation{
		OperationID: "drift-ack", Method: http.MethodPost, Path: "/v1/drift/ack", Tags: driftTags,
		Summary: "Acknowledge a soul's drift",
		Description: "Acknowledges the drift of one seed of a soul, or of all its seeds, for a while (at most 90 days): it is " +
			"reported as acknowledged and raises no notification until its state changes or the time passes. Audit soul.drift_acknowledged.",
		Errors: []int{http.StatusNotFound},
	}, auth.DriftAck, false, func(ctx context.Context, in *struct{ Body client.DriftAck }) (*struct{ Body client.SoulDrift }, error) {
		b := in.Body
		until, err := parseAckUntil(b.Until, s.now())
		if err != nil {
			return nil, invalid("drift.ack_invalid", "body.until", "%v", err)
		}
		if until.Sub(s.now()) > maxAckFor {
			return nil, invalid("drift.ack_invalid", "body.until", "%s is more than 90 days ahead", b.Until)
		}
		if so, err := s.store.SoulGet(ctx, b.SID); err == nil && !sees(ctx, so.Project, nil) {
			return nil, &store.Error{Err: store.ErrNotFound, Kind: "drift", Key: b.SID}
		}
		if _, err := s.store.DriftAck(ctx, store.DriftAckParams{SID: b.SID, SeedID: b.SeedID, Until: until, Reason: b.Reason,
			Actor: principal(ctx).Actor()}); err != nil {
			return nil, err
		}
		ds, err := s.store.DriftList(ctx, store.DriftListParams{SID: b.SID, Limit: 1})
		if err != nil {
			return nil, err
		}
		items := driftWire(ds, s.now())
		if len(items) == 0 || items[0].SID != b.SID {
			return nil, &store.Error{Err: store.ErrNotFound, Kind: "drift", Key: b.SID}
		}
		return &struct{ Body client.SoulDrift }{Body: items[0]}, nil
	})
}

// driftSoulCounts counts the souls of project (every project's for "")
// by their seeds' worst state, and how many of the drifted ones are
// acknowledged.
func (s *Server) driftSoulCounts(ctx context.Context, project string) (map[string]int, int, error) {
	counts, acked := map[string]int{}, 0
	after := ""
	for {
		ds, err := s.store.DriftList(ctx, store.DriftListParams{After: after, Limit: 500, Project: project})
		if err != nil {
			return nil, 0, err
		}
		souls := driftWire(ds, s.now())
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

// submitSeedAs submits a seed's run in mode with key, as its creator.
func (s *Server) submitSeedAs(ctx context.Context, sd store.SoulSeed, mode client.RunMode, key string) (store.Run, error) {
	input, err := seedInput(sd.Input, sd.SID)
	if err != nil {
		return store.Run{}, fmt.Errorf("seed %d input: %w", sd.ID, err)
	}
	// The creator must still be allowed to start runs: a revoked or
	// expired token's seeds do not run, nor are they checked.
	if err := (auth.Checker{Tokens: s.store, Now: s.now}).Authorize(ctx, sd.CreatedBy, auth.RunCreate); err != nil {
		return store.Run{}, fmt.Errorf("seed %d: its creator %w", sd.ID, err)
	}
	// A seed's run acts in its soul's project.
	so, err := s.store.SoulGet(ctx, sd.SID)
	if err != nil {
		return store.Run{}, fmt.Errorf("seed %d: %w", sd.ID, err)
	}
	checked, problems := s.check(so.Project, fmt.Sprintf("seed-%d.yaml", sd.ID), sd.Scenario, input)
	if len(problems) > 0 {
		return store.Run{}, fmt.Errorf("seed %d: %s: %s", sd.ID, problems[0].Location, problems[0].Message)
	}
	run, _, err := s.runs.Submit(ctx, runner.SubmitParams{
		Name: checked.Name, Scenario: sd.Scenario, Input: checked.Input, Secret: checked.Secret,
		Key: key, Actor: store.Actor(sd.CreatedBy), Mode: mode, Project: so.Project,
	})
	return run, err
}

// driftDesc is the drift gauge: each project's souls by their seeds'
// worst state.
var driftDesc = prometheus.NewDesc("soulstack_souls_drift",
	"Souls by project and drift state (their seeds' worst; acknowledged drift counts as drifted_acknowledged).", []string{"project", "state"}, nil)

// driftCollector reads the drift counts at each scrape, bounded in time.
type driftCollector struct{ s *Server }

func (c driftCollector) Describe(ch chan<- *prometheus.Desc) { ch <- driftDesc }

func (c driftCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	after := ""
	for {
		projects, err := c.s.store.ProjectList(ctx, store.ListParams{Limit: 500, After: after})
		if err != nil {
			c.s.log.Warn("drift metrics", "err", err)
			return
		}
		for _, p := range projects {
			counts, acked, err := c.s.driftSoulCounts(ctx, p.Name)
			if err != nil {
				c.s.log.Warn("drift metrics", "project", p.Name, "err", err)
				return
			}
			counts[store.DriftDrifted] -= acked
			counts["drifted_acknowledged"] = acked
			for _, st := range []string{store.DriftInSync, store.DriftDrifted, "drifted_acknowledged", store.DriftUnknown, store.DriftUnreachable, store.DriftChecking} {
				ch <- prometheus.MustNewConstMetric(driftDesc, prometheus.GaugeValue, float64(counts[st]), p.Name, st)
			}
		}
		if len(projects) < 500 {
			return
		}
		after = projects[len(projects)-1].Name
	}
}

func (s *Server) registerDeliveries() {
	register(s, huma.Operation{
		OperationID: "delivery-list", Method: http.MethodGet, Path: "/v1/notifications/deliveries", Tags: []string{"notifications"},
		Summary: "The webhook delivery log",
		Description: "Every outgoing webhook delivery (keeper.yml notifications), newest first: its event, object and project, status " +
			"(pending, delivered, failed), attempts and the receiver's last answer. A project's token lists its project's deliveries " +
			"alone. Page with after (a delivery id).",
	}, auth.AuditRead, false, func(ctx context.Context, in *struct {
		Limit int    `query:"limit" minimum:"0" maximum:"500" required:"false"`
		After string `query:"after" required:"false" doc:"List deliveries older than this one."`
	}) (*struct{ Body client.DeliveryList }, error) {
		limit := in.Limit
		if limit == 0 {
			limit = 100
		}
		ds, err := s.store.Deliveries(ctx, store.DeliveryListParams{Before: in.After, Limit: limit, Project: scopeOf(ctx)})
		if err != nil {
			return nil, err
		}
		out := client.DeliveryList{Items: []client.Delivery{}}
		for _, d := range ds {
			out.Items = append(out.Items, client.Delivery{ID: d.ID, Notification: d.Notification, Event: d.Event, Object: d.Object, Project: d.Project, Status: d.Status,
				Attempts: d.Attempts, LastCode: d.LastCode, LastError: d.LastError, CreatedAt: d.CreatedAt, UpdatedAt: d.UpdatedAt})
		}
		if len(ds) == limit {
			out.Next = ds[len(ds)-1].ID
		}
		return &struct{ Body client.DeliveryList }{Body: out}, nil
	})
}

func (s *Server) registerCloudDrift() {
	if s.cloud == nil {
		return
	}
	register(s, huma.Operation{
		OperationID: "drift-cloud", Method: http.MethodGet, Path: "/v1/drift/cloud", Tags: driftTags,
		Summary: "Cloud drift: VMs against the registry",
		Description: "Per provider (one with provider=), the VMs its driver lists against the souls the registry holds for them: " +
			"live souls whose VM is gone (missing), not running (stopped) or of another size than it was registered with (resized), " +
			"and VMs this deployment made that no live soul owns (orphans). A driver that cannot list its VMs says listable false. " +
			"A project's token is answered of its project's own providers and souls alone (another project's provider is a 404, " +
			"one shared with it a 403). Asks every driver, so it is slower than GET /v1/drift.",
		Errors: []int{http.StatusForbidden, http.StatusNotFound, http.StatusBadGateway},
	}, auth.ProviderRead, false, func(ctx context.Context, in *struct {
		Provider string `query:"provider" required:"false"`
	}) (*struct{ Body client.CloudDriftReport }, error) {
		if in.Provider != "" {
			if err := s.providerManaged(ctx, in.Provider); err != nil {
				return nil, err
			}
		}
		ps, err := s.cloud.CloudDrift(ctx, in.Provider, scopeOf(ctx))
		if err != nil {
			return nil, err
		}
		return &struct{ Body client.CloudDriftReport }{Body: client.CloudDriftReport{Providers: ps}}, nil
	})
}
