package api

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/auth"
	"github.com/soulstack/soulstack/internal/store"
)

type nameInput struct {
	Name string `path:"name" doc:"The object's name."`
}

type providerOutput struct {
	Body client.Provider
}

// providerWire is a provider as the caller sees it: its credentials
// reference, config and the projects it is shared with only to a caller of
// its own project (a share lets a project use a provider, never learn
// where its secrets are or what its config holds).
func providerWire(ctx context.Context, p store.Provider) client.Provider {
	out := client.Provider{
		Name: p.Name, Driver: p.Driver, Region: p.Region,
		FQDNSuffix: p.FQDNSuffix, CreatedAt: p.CreatedAt, CreatedBy: p.CreatedBy, Project: p.Project,
	}
	if manages(ctx, p.Project) {
		out.CredentialsRef, out.Config, out.SharedWith = p.CredentialsRef, p.Config, p.SharedWith
	}
	return out
}

func providerOwner(p store.Provider) (string, []string) { return p.Project, p.SharedWith }

func (s *Server) registerProviders() {
	tags := []string{"providers"}
	register(s, huma.Operation{
		OperationID: "provider-create", Method: http.MethodPost, Path: "/v1/providers", Tags: tags,
		Summary: "Register a cloud provider", DefaultStatus: http.StatusCreated,
		Errors: []int{http.StatusBadRequest, http.StatusConflict, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity},
	}, auth.ProviderCreate, false, func(ctx context.Context, in *struct{ Body client.ProviderCreate }) (*providerOutput, error) {
		b := in.Body
		if err := first(
			checkName("body.name", b.Name),
			checkName("body.driver", b.Driver),
			checkRef("provider.credentials_ref_invalid", "body.credentials_ref", b.CredentialsRef),
			fqdnSuffix("body.fqdn_suffix", b.FQDNSuffix),
		); err != nil {
			return nil, err
		}
		project, err := createIn(ctx, b.Project)
		if err != nil {
			return nil, err
		}
		if err := s.checkRefWrite(ctx, "provider.credentials_ref_invalid", "body.credentials_ref", project, b.CredentialsRef); err != nil {
			return nil, err
		}
		if err := s.checkEndpoint(b.Driver, b.Config); err != nil {
			return nil, err
		}
		config := objectJSON(b.Config)
		p, err := s.registry.ProviderCreate(ctx, store.ProviderCreateParams{
			Provider: store.Provider{Name: b.Name, Driver: b.Driver, Region: b.Region, CredentialsRef: b.CredentialsRef, FQDNSuffix: b.FQDNSuffix, Config: config, Project: project},
			Actor:    principal(ctx).Actor(),
		})
		if err != nil {
			return nil, err
		}
		return &providerOutput{Body: providerWire(ctx, p)}, nil
	})

	register(s, huma.Operation{
		OperationID: "provider-list", Method: http.MethodGet, Path: "/v1/providers", Tags: tags,
		Summary: "List providers by name",
	}, auth.ProviderRead, false, func(ctx context.Context, in *ListInput) (*struct{ Body client.ProviderList }, error) {
		items, next, err := listPage(ctx, in, s.registry.ProviderList, func(p store.Provider) string { return p.Name }, providerWire)
		return &struct{ Body client.ProviderList }{Body: client.ProviderList{Items: items, Next: next}}, err
	})

	registerGet[nameInput](s, huma.Operation{
		OperationID: "provider-get", Method: http.MethodGet, Path: "/v1/providers/{name}", Tags: tags,
		Summary: "Get a provider", Errors: []int{http.StatusNotFound},
	}, auth.ProviderRead, "provider", s.registry.ProviderGet, providerOwner, providerWire)

	registerDelete[nameInput](s, huma.Operation{
		OperationID: "provider-delete", Method: http.MethodDelete, Path: "/v1/providers/{name}", Tags: tags,
		Summary: "Delete a provider", Description: "Refused with 409 provider.in_use while profiles use it.",
		DefaultStatus: http.StatusNoContent, Errors: []int{http.StatusNotFound, http.StatusConflict},
	}, auth.ProviderDelete, "provider", s.registry.ProviderGet, providerOwner, s.registry.ProviderDelete)
}

// fqdnSuffix validates an optional DNS suffix.
func fqdnSuffix(location, suffix string) *client.Problem {
	if suffix == "" {
		return nil
	}
	if p := checkSID(location, suffix); p != nil {
		return invalid("provider.fqdn_suffix_invalid", location, "%q is not a DNS name", suffix)
	}
	return nil
}
