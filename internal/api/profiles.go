package api

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/auth"
	"github.com/soulstack/soulstack/internal/module"
	"github.com/soulstack/soulstack/internal/store"
)

type profileOutput struct {
	Body client.Profile
}

func profileWire(ctx context.Context, p store.Profile) client.Profile {
	out := client.Profile{Name: p.Name, Provider: p.Provider, Spec: p.Spec, CreatedAt: p.CreatedAt, CreatedBy: p.CreatedBy, Project: p.Project}
	if manages(ctx, p.Project) {
		out.SharedWith = p.SharedWith
	}
	return out
}

func profileOwner(p store.Profile) (string, []string) { return p.Project, p.SharedWith }

func (s *Server) registerProfiles() {
	tags := []string{"profiles"}
	register(s, huma.Operation{
		OperationID: "profile-create", Method: http.MethodPost, Path: "/v1/profiles", Tags: tags,
		Summary: "Register a VM profile", Description: "422 profile.provider_missing when the provider does not exist.",
		DefaultStatus: http.StatusCreated,
		Errors:        []int{http.StatusBadRequest, http.StatusConflict, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity},
	}, auth.ProfileCreate, false, func(ctx context.Context, in *struct{ Body client.ProfileCreate }) (*profileOutput, error) {
		b := in.Body
		if err := first(checkName("body.name", b.Name), checkName("body.provider", b.Provider)); err != nil {
			if p, ok := err.(*client.Problem); ok && p.Errors[0].Location == "body.provider" {
				// A malformed provider name cannot name a registered provider.
				return nil, invalid("profile.provider_missing", "body.provider", "provider %q does not exist: %s", b.Provider, p.Detail)
			}
			return nil, err
		}
		project, err := createIn(ctx, b.Project)
		if err != nil {
			return nil, err
		}
		// The provider must be the project's or shared with it; another
		// project's is as missing as one that does not exist.
		if prov, err := s.registry.ProviderGet(ctx, b.Provider); err == nil && !module.Visible(prov.Project, prov.SharedWith, project) {
			return nil, invalid("profile.provider_missing", "body.provider", "provider %q does not exist", b.Provider)
		}
		spec := objectJSON(b.Spec)
		p, err := s.registry.ProfileCreate(ctx, store.ProfileCreateParams{
			Profile: store.Profile{Name: b.Name, Provider: b.Provider, Spec: spec, Project: project},
			Actor:   principal(ctx).Actor(),
		})
		if err != nil {
			return nil, err
		}
		return &profileOutput{Body: profileWire(ctx, p)}, nil
	})

	register(s, huma.Operation{
		OperationID: "profile-list", Method: http.MethodGet, Path: "/v1/profiles", Tags: tags,
		Summary: "List profiles by name",
	}, auth.ProfileRead, false, func(ctx context.Context, in *ListInput) (*struct{ Body client.ProfileList }, error) {
		items, next, err := listPage(ctx, in, s.registry.ProfileList, func(p store.Profile) string { return p.Name }, profileWire)
		return &struct{ Body client.ProfileList }{Body: client.ProfileList{Items: items, Next: next}}, err
	})

	registerGet[nameInput](s, huma.Operation{
		OperationID: "profile-get", Method: http.MethodGet, Path: "/v1/profiles/{name}", Tags: tags,
		Summary: "Get a profile", Errors: []int{http.StatusNotFound},
	}, auth.ProfileRead, "profile", s.registry.ProfileGet, profileOwner, profileWire)

	registerDelete[nameInput](s, huma.Operation{
		OperationID: "profile-delete", Method: http.MethodDelete, Path: "/v1/profiles/{name}", Tags: tags,
		Summary: "Delete a profile", DefaultStatus: http.StatusNoContent, Errors: []int{http.StatusNotFound},
	}, auth.ProfileDelete, "profile", s.registry.ProfileGet, profileOwner, s.registry.ProfileDelete)
}
