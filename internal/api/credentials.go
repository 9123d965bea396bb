package api

import (
	"context"
	"fmt"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/auth"
	"github.com/soulstack/soulstack/internal/secret"
	"github.com/soulstack/soulstack/internal/store"
)

// checkRefWrite checks that the caller may give an object of project the
// credentials reference ref: credential:NAME always (it resolves in the
// object's own project); file: and env: only with credential.local (a
// keeper admin: they read the keeper's machine); vault: under the
// project's Vault prefix, or with credential.local. The keeper checks the
// reference again wherever it resolves it.
func (s *Server) checkRefWrite(ctx context.Context, code, location, project, ref string) error {
	if p := checkRef(code, location, ref); p != nil {
		return p
	}
	if ref == "" {
		return nil
	}
	r, _ := secret.ParseRef(ref)
	caller := principal(ctx)
	switch {
	case r.Scheme == "credential", caller.Can(auth.CredentialLocal):
		return nil
	case r.Scheme == "vault" && s.refs.VaultPrefix != nil:
		if secret.UnderPrefix(r.Name, s.refs.VaultPrefix(project)) {
			return nil
		}
	}
	return &auth.ForbiddenError{TokenID: caller.TokenID, Permission: auth.CredentialLocal,
		Reason: fmt.Sprintf("lacks permission %s (a keeper admin's): %s at %s reaches beyond project %s's own secrets; use credential:NAME (PUT /v1/projects/%s/credentials/NAME)%s",
			auth.CredentialLocal, r, location, project, project, s.vaultHint(project))}
}

// vaultHint names the project's Vault prefix, when there is one.
func (s *Server) vaultHint(project string) string {
	if s.refs.VaultPrefix == nil || s.refs.VaultPrefix(project) == "" {
		return ""
	}
	return " or a vault: path under " + s.refs.VaultPrefix(project)
}

// checkEndpoint refuses a provider config naming an endpoint keeper.yml
// does not allow its driver.
func (s *Server) checkEndpoint(driver string, config map[string]any) error {
	ep, ok := config["endpoint"]
	if !ok || ep == nil || ep == "" {
		return nil // the cloud's own
	}
	e, _ := ep.(string)
	if s.refs.EndpointAllowed == nil || !s.refs.EndpointAllowed(driver, e) {
		return invalid("provider.endpoint_not_allowed", "body.config.endpoint",
			"%v receives the provider's credentials and its VMs' userdata; a keeper admin allows endpoints per driver in keeper.yml (drivers.%s.endpoints)", ep, driver)
	}
	return nil
}

func credentialWire(c store.Credential) client.Credential {
	return client.Credential{Project: c.Project, Name: c.Name, Ref: "credential:" + c.Name, CreatedAt: c.CreatedAt, CreatedBy: c.CreatedBy}
}

// registerCredentials registers a project's credentials registry: its
// admins store secrets there, its providers and souls name them, nobody
// reads them back.
func (s *Server) registerCredentials() {
	tags := []string{"projects"}
	inProject := s.inProject
	if s.projectKey != nil {
		register(s, huma.Operation{
			OperationID: "project-ssh-key", Method: http.MethodGet, Path: "/v1/projects/{name}/ssh-key", Tags: tags,
			Summary: "A project's keeper SSH public key",
			Description: "Each project has its own keeper SSH key: its souls without a key_ref are reached with it and its VMs' userdata " +
				"authorizes it, so that a host trusting one project's key does not run another project's commands. The default project's is the keeper's own key.",
			Errors: []int{http.StatusNotFound},
		}, auth.SoulRead, false, func(ctx context.Context, in *struct {
			Name string `path:"name"`
		}) (*struct{ Body client.ProjectSSHKey }, error) {
			if err := inProject(ctx, in.Name); err != nil {
				return nil, err
			}
			k, err := s.projectKey(ctx, in.Name)
			if err != nil {
				return nil, err
			}
			return &struct{ Body client.ProjectSSHKey }{Body: client.ProjectSSHKey{Project: in.Name, PublicKey: k}}, nil
		})
	}
	if s.seal == nil {
		return
	}
	register(s, huma.Operation{
		OperationID: "credential-put", Method: http.MethodPut, Path: "/v1/projects/{name}/credentials/{credential}", Tags: tags,
		Summary: "Store a secret in a project's credentials registry",
		Description: "The value is sealed with the data key and never shown again; the project's providers and souls name it as " +
			"credential:NAME (credentials_ref, key_ref), resolved in their own project alone. Replaces a credential of the name. Audit credential.put.",
		Errors: []int{http.StatusNotFound, http.StatusUnprocessableEntity},
	}, auth.CredentialManage, false, func(ctx context.Context, in *struct {
		Name       string `path:"name"`
		Credential string `path:"credential"`
		Body       client.CredentialPut
	}) (*struct{ Body client.Credential }, error) {
		if err := inProject(ctx, in.Name); err != nil {
			return nil, err
		}
		if _, err := secret.ParseRef("credential:" + in.Credential); err != nil {
			return nil, invalid("credential.name_invalid", "path.credential", "%q is not a credential name (lowercase letters, digits and -)", in.Credential)
		}
		// Not registered for masking here: it is when a provider or soul
		// resolves it, so that storing credentials cannot crowd the
		// keeper's own secrets out of the masker.
		c, err := s.projectStore.CredentialPut(ctx, store.Credential{Project: in.Name, Name: in.Credential, Sealed: s.seal([]byte(in.Body.Value))}, principal(ctx).Actor())
		if err != nil {
			return nil, err
		}
		return &struct{ Body client.Credential }{Body: credentialWire(c)}, nil
	})
	s.registerCredentialListDelete()
}

// registerCredentialListDelete registers listing and deleting a project's credentials.
func (s *Server) registerCredentialListDelete() {
	tags := []string{"projects"}
	inProject := s.inProject
	register(s, huma.Operation{
		OperationID: "credential-list", Method: http.MethodGet, Path: "/v1/projects/{name}/credentials", Tags: tags,
		Summary: "List a project's credentials (names, never values)", Errors: []int{http.StatusNotFound},
	}, auth.ProviderRead, false, func(ctx context.Context, in *struct {
		Name string `path:"name"`
	}) (*struct{ Body client.CredentialList }, error) {
		if err := inProject(ctx, in.Name); err != nil {
			return nil, err
		}
		cs, err := s.projectStore.CredentialList(ctx, in.Name)
		if err != nil {
			return nil, err
		}
		out := &struct{ Body client.CredentialList }{Body: client.CredentialList{Items: make([]client.Credential, 0, len(cs))}}
		for _, c := range cs {
			out.Body.Items = append(out.Body.Items, credentialWire(c))
		}
		return out, nil
	})
	register(s, huma.Operation{
		OperationID: "credential-delete", Method: http.MethodDelete, Path: "/v1/projects/{name}/credentials/{credential}", Tags: tags,
		Summary: "Delete a credential", Description: "Audit credential.deleted. Providers and souls naming it fail to resolve it from then on.",
		DefaultStatus: http.StatusNoContent, Errors: []int{http.StatusNotFound},
	}, auth.CredentialManage, false, func(ctx context.Context, in *struct {
		Name       string `path:"name"`
		Credential string `path:"credential"`
	}) (*struct{}, error) {
		if err := inProject(ctx, in.Name); err != nil {
			return nil, err
		}
		return nil, s.projectStore.CredentialDelete(ctx, in.Name, in.Credential, principal(ctx).Actor())
	})
}
