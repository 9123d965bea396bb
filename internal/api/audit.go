package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/danielgtaylor/huma/v2"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/audit"
	"github.com/soulstack/soulstack/internal/auth"
	"github.com/soulstack/soulstack/internal/store"
)

// errNoAuditVerifier is returned when the server was built without a way
// to verify the audit log.
var errNoAuditVerifier = errors.New("audit verification is not configured")

// ReportWire converts a verification report to its wire form.
func ReportWire(r audit.Report) *client.AuditReport {
	out := &client.AuditReport{OK: r.OK, Checked: r.Checked, HeadSeq: r.HeadSeq, Legacy: r.Legacy, Checkpoints: r.Checkpoints, Restores: r.Restores, Superseded: r.Superseded, Problems: make([]client.AuditProblem, 0, len(r.Problems))}
	for _, p := range r.Problems {
		out.Problems = append(out.Problems, client.AuditProblem{Seq: p.Seq, Kind: p.Kind, Message: p.Message})
	}
	return out
}

func (s *Server) registerAudit() {
	register(s, huma.Operation{
		OperationID: "audit-list", Method: http.MethodGet, Path: "/v1/audit", Tags: []string{"audit"},
		Summary: "List audit events, and verify the hash chain",
		Description: "Events in sequence order. With verify=true the answer also carries the verification of the whole chain, naming every edited, deleted or recomputed row and every truncation a signed checkpoint reveals. " +
			"A project's token lists the events about its project alone (and may not verify: 403 auth.keeper_wide_required); keeper-wide tokens list every event.",
	}, auth.AuditRead, false, func(ctx context.Context, in *struct {
		ListInput
		Verify bool `query:"verify" doc:"Also verify the whole hash chain."`
	}) (*struct{ Body client.AuditList }, error) {
		after := int64(0)
		if in.After != "" {
			n, err := strconv.ParseInt(in.After, 10, 64)
			if err != nil || n < 0 {
				return nil, invalid("request.invalid", "query.after", "must be a sequence number")
			}
			after = n
		}
		// A project's token reads its project's events; the chain, which
		// runs through every project's, is verified by keeper-wide ones.
		if in.Verify && !principal(ctx).KeeperWide() {
			return nil, problem(http.StatusForbidden, "auth.keeper_wide_required", "verifying the audit chain reads every project's events; it needs a keeper-wide token")
		}
		evs, err := s.auditStore.AuditList(ctx, store.AuditListParams{Limit: in.Limit + 1, AfterSeq: after, Project: scopeOf(ctx)})
		if err != nil {
			return nil, err
		}
		evs, next := page(evs, in.Limit, func(e audit.Event) string { return strconv.FormatInt(e.Seq, 10) })
		out := &struct{ Body client.AuditList }{Body: client.AuditList{Items: make([]client.AuditEvent, 0, len(evs)), Next: next}}
		people := map[string]*client.Person{} // by actor token id, read once a page
		for _, e := range evs {
			person, known := people[e.ActorAID]
			if !known && strings.HasPrefix(e.ActorAID, "tok_") {
				if t, err := s.tokenStore.TokenGet(ctx, e.ActorAID); err == nil {
					person = personWire(t.Person)
				}
				people[e.ActorAID] = person
			}
			out.Body.Items = append(out.Body.Items, client.AuditEvent{
				Seq: e.Seq, At: e.At, ActorAID: e.ActorAID, Action: e.Action, Object: e.Object,
				Payload: json.RawMessage(e.Payload), PrevHash: e.PrevHash, Hash: e.Hash, ActorPerson: person,
			})
		}
		if in.Verify {
			if s.audit == nil {
				return nil, errNoAuditVerifier
			}
			r, err := s.audit(ctx)
			if err != nil {
				return nil, err
			}
			out.Body.Verify = ReportWire(r)
		}
		return out, nil
	})
}
