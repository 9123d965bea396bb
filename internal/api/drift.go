package api

// The drift routes: a thin skin over the drift service (internal/drift),
// which starts checks, judges them and keeps the souls' drift.

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/danielgtaylor/huma/v2"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/auth"
	"github.com/soulstack/soulstack/internal/drift"
	"github.com/soulstack/soulstack/internal/store"
)

var driftTags = []string{"drift"}

func (s *Server) registerDrift() {
	if s.drift == nil {
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
		started, err := s.drift.Check(ctx, drift.Target{SIDs: b.SIDs, All: b.All, Label: label, Project: scopeOf(ctx)})
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
		out, err := s.drift.Report(ctx, drift.ReportParams{State: in.State, SID: in.SID, After: in.After, Limit: limit, Project: scopeOf(ctx)})
		if err != nil {
			return nil, err
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
		out, err := s.drift.Ack(ctx, drift.AckParams{SID: b.SID, SeedID: b.SeedID, Until: b.Until, Reason: b.Reason, Project: scopeOf(ctx), Actor: principal(ctx).Actor()})
		var bad *drift.AckUntilError
		if errors.As(err, &bad) {
			return nil, invalid("drift.ack_invalid", "body.until", "%s", bad.Reason)
		}
		if err != nil {
			return nil, err
		}
		return &struct{ Body client.SoulDrift }{Body: out}, nil
	})
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
		ds, err := s.auditStore.Deliveries(ctx, store.DeliveryListParams{Before: in.After, Limit: limit, Project: scopeOf(ctx)})
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
