package api

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/auth"
	"github.com/soulstack/soulstack/internal/store"
)

type sidInput struct {
	SID string `path:"sid" doc:"The soul's id."`
}

type soulOutput struct {
	Body client.Soul
}

func soulWire(_ context.Context, so store.Soul) client.Soul {
	return client.Soul{
		SID: so.SID, Status: so.Status, Address: so.Address, Provider: so.Provider, VMID: so.VMID, PrimaryIP: so.PrimaryIP,
		Attributes: so.Attributes, CreatedByAID: so.CreatedByAID, CreatedAt: so.CreatedAt, UpdatedAt: so.UpdatedAt,
		Project: so.Project, LastSeenAt: so.LastSeenAt, LastError: so.LastError, CertSerial: so.CertSerial, CertNotAfter: so.CertNotAfter, JoinedAt: so.JoinedAt,
		Executor:   so.Executor,
		Connection: client.Connection{Transport: so.Connection.Transport, User: so.Connection.User, Port: so.Connection.Port, KeyRef: so.Connection.KeyRef, HostKey: so.Connection.HostKey},
	}
}

func soulOwner(so store.Soul) (string, []string) { return so.Project, nil }

func (s *Server) registerSouls() {
	tags := []string{"souls"}
	register(s, huma.Operation{
		OperationID: "soul-create", Method: http.MethodPost, Path: "/v1/souls", Tags: tags,
		Summary: "Register an existing host as a soul", DefaultStatus: http.StatusCreated,
		Errors: []int{http.StatusBadRequest, http.StatusConflict, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity},
	}, auth.SoulCreate, false, func(ctx context.Context, in *struct{ Body client.SoulCreate }) (*soulOutput, error) {
		b := in.Body
		c := b.Connection
		if err := first(
			checkSID("body.sid", b.SID),
			checkHost("body.address", b.Address),
			checkRef("soul.key_ref_invalid", "body.connection.key_ref", c.KeyRef),
			userName("body.connection.user", c.User),
		); err != nil {
			return nil, err
		}
		if c.HostKey != "" {
			return nil, invalid("request.invalid", "body.connection.host_key", "is pinned by the keeper on first contact and cannot be set")
		}
		project, err := createIn(ctx, b.Project)
		if err != nil {
			return nil, err
		}
		if err := s.checkRefWrite(ctx, "soul.key_ref_invalid", "body.connection.key_ref", project, c.KeyRef); err != nil {
			return nil, err
		}
		attrs := objectJSON(b.Attributes)
		actor := principal(ctx).Actor()
		aid := string(actor)
		so, err := s.soulStore.SoulCreate(ctx, store.SoulCreateParams{
			Soul: store.Soul{
				SID: b.SID, Status: store.SoulActive, Address: b.Address, Attributes: attrs, CreatedByAID: &aid, Project: project,
				Connection: store.Connection{Transport: c.Transport, User: c.User, Port: c.Port, KeyRef: c.KeyRef},
			},
			Actor: actor,
		})
		if err != nil {
			return nil, err
		}
		return &soulOutput{Body: soulWire(ctx, so)}, nil
	})
	s.registerRegisteredSouls()
}

// registerRegisteredSouls registers the routes on souls already registered: list, get, delete.
func (s *Server) registerRegisteredSouls() {
	tags := []string{"souls"}
	register(s, huma.Operation{
		OperationID: "soul-list", Method: http.MethodGet, Path: "/v1/souls", Tags: tags,
		Summary: "List souls by SID", Description: "Filters (status, provider, label) combine: a soul is listed when it matches every one given.",
	}, auth.SoulRead, false, func(ctx context.Context, in *soulListInput) (*struct{ Body client.SoulList }, error) {
		p, err := in.params(s.secrets)
		if err != nil {
			return nil, err
		}
		p.Project = scopeOf(ctx)
		rs, err := s.soulStore.SoulSearch(ctx, p)
		if err != nil {
			return nil, err
		}
		rs, next := page(rs, in.Limit, func(so store.Soul) string { return so.SID })
		items := make([]client.Soul, 0, len(rs))
		for _, so := range rs {
			items = append(items, soulWire(ctx, so))
		}
		return &struct{ Body client.SoulList }{Body: client.SoulList{Items: items, Next: next}}, nil
	})

	registerGet[sidInput](s, huma.Operation{
		OperationID: "soul-get", Method: http.MethodGet, Path: "/v1/souls/{sid}", Tags: tags,
		Summary: "Get a soul", Errors: []int{http.StatusNotFound},
	}, auth.SoulRead, "soul", s.soulStore.SoulGet, soulOwner, soulWire)

	registerDelete[sidInput](s, huma.Operation{
		OperationID: "soul-delete", Method: http.MethodDelete, Path: "/v1/souls/{sid}", Tags: tags,
		Summary: "Remove a soul from the registry", Description: "The host itself is not touched.",
		DefaultStatus: http.StatusNoContent, Errors: []int{http.StatusNotFound},
	}, auth.SoulDelete, "soul", s.soulStore.SoulGet, soulOwner, func(ctx context.Context, p store.DeleteParams) error {
		// A cloud-made soul's VM outlives the record as an orphan, which
		// anyone with provider.delete may then destroy: the delete goes
		// through the policies that hold core.cloud.destroyed.
		so, err := s.soulStore.SoulGet(ctx, p.Key)
		if err != nil {
			return err
		}
		if so.VMID != "" && so.Status != store.SoulDestroyed {
			if err := s.destroyHeld(ctx, so.Project, so.Provider, []string{so.VMID}, "deleting soul "+so.SID); err != nil {
				return err
			}
		}
		return s.soulStore.SoulDelete(ctx, p)
	})
}

// userName validates a POSIX user name for SSH.
func userName(location, user string) *client.Problem {
	if user == "" || len(user) > 32 {
		return invalid("soul.user_invalid", location, "must be 1 to 32 characters")
	}
	for i, r := range user {
		ok := r == '_' || (r >= 'a' && r <= 'z') || (i > 0 && (r == '-' || r == '.' || (r >= '0' && r <= '9') || (r >= 'A' && r <= 'Z'))) || (r >= 'A' && r <= 'Z')
		if !ok {
			return invalid("soul.user_invalid", location, "%q is not a valid user name", user)
		}
	}
	return nil
}
