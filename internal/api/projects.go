package api

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/danielgtaylor/huma/v2"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/auth"
	"github.com/soulstack/soulstack/internal/store"
)

func projectWire(_ context.Context, p store.Project) client.Project {
	return client.Project{Name: p.Name, Description: p.Description, CreatedAt: p.CreatedAt, CreatedBy: p.CreatedBy, Quota: client.Quota(p.Quota)}
}

func projectOwner(p store.Project) (string, []string) { return p.Name, nil }

func (s *Server) registerProjects() {
	tags := []string{"projects"}
	register(s, huma.Operation{
		OperationID: "project-create", Method: http.MethodPost, Path: "/v1/projects", Tags: tags,
		Summary: "Create a project", DefaultStatus: http.StatusCreated,
		Description: "A project is a team's share of the keeper (audit project.created). The default project always exists.",
		Errors:      []int{http.StatusBadRequest, http.StatusConflict, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity},
	}, auth.ProjectManage, false, func(ctx context.Context, in *struct{ Body client.ProjectCreate }) (*struct{ Body client.Project }, error) {
		if err := checkName("body.name", in.Body.Name); err != nil {
			return nil, err
		}
		p, err := s.projectStore.ProjectCreate(ctx, store.ProjectCreateParams{
			Project: store.Project{Name: in.Body.Name, Description: in.Body.Description}, Actor: principal(ctx).Actor(),
		})
		if err != nil {
			return nil, err
		}
		return &struct{ Body client.Project }{Body: projectWire(ctx, p)}, nil
	})

	register(s, huma.Operation{
		OperationID: "project-list", Method: http.MethodGet, Path: "/v1/projects", Tags: tags,
		Summary: "List projects by name",
	}, auth.ProjectManage, false, func(ctx context.Context, in *ListInput) (*struct{ Body client.ProjectList }, error) {
		items, next, err := listPage(ctx, in, s.projectStore.ProjectList, func(p store.Project) string { return p.Name }, projectWire)
		return &struct{ Body client.ProjectList }{Body: client.ProjectList{Items: items, Next: next}}, err
	})

	registerGet[nameInput](s, huma.Operation{
		OperationID: "project-get", Method: http.MethodGet, Path: "/v1/projects/{name}", Tags: tags,
		Summary: "Get a project", Errors: []int{http.StatusNotFound},
	}, auth.ProjectManage, "project", s.projectStore.ProjectGet, projectOwner, projectWire)

	register(s, huma.Operation{
		OperationID: "project-delete", Method: http.MethodDelete, Path: "/v1/projects/{name}", Tags: tags,
		Summary:       "Delete a project",
		Description:   "Audit project.deleted. The default project cannot be deleted (409 project.default).",
		DefaultStatus: http.StatusNoContent, Errors: []int{http.StatusNotFound, http.StatusConflict},
	}, auth.ProjectManage, false, func(ctx context.Context, in *nameInput) (*struct{}, error) {
		if in.Name == store.DefaultProject {
			return nil, problem(http.StatusConflict, "project.default", "the default project always exists; it holds what the keeper held before projects")
		}
		return nil, s.projectStore.ProjectDelete(ctx, store.DeleteParams{Key: in.Name, Actor: principal(ctx).Actor()})
	})
}

// withdrawAfterBinding revokes the person tokens of project whose role a
// binding change took away. The change stands either way; a token it
// cannot revoke now is logged and revoked at the keeper's next start.
func (s *Server) withdrawAfterBinding(ctx context.Context, project string) {
	if _, err := s.access.WithdrawLapsed(ctx, project, principal(ctx).Actor()); err != nil {
		s.log.Error("withdraw access after a binding change", "project", project, "err", err)
	}
}

func bindingWire(b store.Binding) client.Binding {
	return client.Binding{Project: b.Project, Kind: b.Kind, Subject: b.Subject, Role: b.Role, CreatedAt: b.CreatedAt, CreatedBy: b.CreatedBy}
}

// registerBindings registers a project's role bindings and quota. Who
// may bind is who may mint tokens there: token.manage in the project (a
// binding is a token at the next sign-in); the quota is the keeper's.
func (s *Server) registerBindings() {
	tags := []string{"projects"}
	inProject := s.inProject
	register(s, huma.Operation{
		OperationID: "binding-list", Method: http.MethodGet, Path: "/v1/projects/{name}/bindings", Tags: tags,
		Summary: "List a project's role bindings", Errors: []int{http.StatusNotFound},
	}, auth.TokenManage, false, func(ctx context.Context, in *struct {
		Name string `path:"name" doc:"The project's name."`
		ListInput
	}) (*struct{ Body client.BindingList }, error) {
		if err := inProject(ctx, in.Name); err != nil {
			return nil, err
		}
		bs, err := s.projectStore.Bindings(ctx, in.Name)
		if err != nil {
			return nil, err
		}
		slices.SortFunc(bs, func(a, b store.Binding) int { return strings.Compare(bindingKey(a), bindingKey(b)) })
		bs, next := pageOf(bs, &in.ListInput, bindingKey)
		out := &struct{ Body client.BindingList }{Body: client.BindingList{Items: make([]client.Binding, 0, len(bs)), Next: next}}
		for _, b := range bs {
			out.Body.Items = append(out.Body.Items, bindingWire(b))
		}
		return out, nil
	})
	register(s, huma.Operation{
		OperationID: "binding-put", Method: http.MethodPut, Path: "/v1/projects/{name}/bindings", Tags: tags,
		Summary: "Bind a group or a person to a role in a project",
		Description: "What the group's members (or the person) get when they sign in to the project with OIDC, besides keeper.yml's oidc.projects; " +
			"replaces the role they had there. Audit binding.put. A project's admin binds in its own project, never above its own role.",
		Errors: []int{http.StatusNotFound, http.StatusUnprocessableEntity},
	}, auth.TokenManage, false, func(ctx context.Context, in *struct {
		Name string `path:"name"`
		Body client.BindingPut
	}) (*struct{ Body client.Binding }, error) {
		if err := inProject(ctx, in.Name); err != nil {
			return nil, err
		}
		b := in.Body
		if b.Kind == store.BindPerson && !strings.Contains(strings.TrimSpace(b.Subject), " ") {
			return nil, invalid("binding.subject_invalid", "body.subject", "a person is named by the issuer and subject of their ID token, joined by a space")
		}
		if _, err := grantFor(principal(ctx), in.Name, client.TokenCreate{Role: b.Role}); err != nil {
			return nil, err
		}
		got, err := s.projectStore.BindingPut(ctx, store.Binding{Project: in.Name, Kind: b.Kind, Subject: strings.TrimSpace(b.Subject), Role: b.Role}, principal(ctx).Actor())
		if err != nil {
			return nil, err
		}
		s.withdrawAfterBinding(ctx, in.Name)
		return &struct{ Body client.Binding }{Body: bindingWire(got)}, nil
	})
	s.registerBindingDeleteQuota()
}

// registerBindingDeleteQuota registers removing a binding and setting a project's quota.
func (s *Server) registerBindingDeleteQuota() {
	tags := []string{"projects"}
	inProject := s.inProject
	register(s, huma.Operation{
		OperationID: "binding-delete", Method: http.MethodDelete, Path: "/v1/projects/{name}/bindings", Tags: tags,
		Summary:       "Remove a role binding",
		Description:   "Audit binding.deleted. The project's person tokens whose role the binding gave, and nothing else still gives, are revoked at once (token.revoked).",
		DefaultStatus: http.StatusNoContent, Errors: []int{http.StatusNotFound},
	}, auth.TokenManage, false, func(ctx context.Context, in *struct {
		Name    string `path:"name"`
		Kind    string `query:"kind" enum:"group,person" required:"true"`
		Subject string `query:"subject" required:"true" maxLength:"500"`
	}) (*struct{}, error) {
		if err := inProject(ctx, in.Name); err != nil {
			return nil, err
		}
		if err := s.projectStore.BindingDelete(ctx, store.Binding{Project: in.Name, Kind: in.Kind, Subject: in.Subject}, principal(ctx).Actor()); err != nil {
			return nil, err
		}
		s.withdrawAfterBinding(ctx, in.Name)
		return nil, nil
	})
	register(s, huma.Operation{
		OperationID: "project-quota", Method: http.MethodPut, Path: "/v1/projects/{name}/quota", Tags: tags,
		Summary: "Set a project's quota",
		Description: "VMs alive, their vCPUs and memory, and runs not finished; 0 is no limit. A create past it is refused with quota.exceeded " +
			"before any driver is called, counted in the create's own transaction. Audit project.quota_set.",
		Errors: []int{http.StatusNotFound},
	}, auth.ProjectManage, false, func(ctx context.Context, in *struct {
		Name string `path:"name"`
		Body client.Quota
	}) (*struct{ Body client.Project }, error) {
		p, err := s.projectStore.ProjectSetQuota(ctx, in.Name, store.Quota(in.Body), principal(ctx).Actor())
		if err != nil {
			return nil, err
		}
		return &struct{ Body client.Project }{Body: projectWire(ctx, p)}, nil
	})
}

// registerShares registers the share routes of providers or profiles
// (kind): the owning project (or a keeper-wide caller) shares it with
// another project to read and use, never to manage; credentials stay in
// the owner's provider. Audit share.added / share.removed.
func registerShares[R, W any](s *Server, kind string, perm auth.Permission, get func(context.Context, string) (R, error), owner owned[R], wire func(context.Context, R) W) {
	tags := []string{kind + "s"}
	owns := func(ctx context.Context, name string) error {
		r, err := get(ctx, name)
		if err != nil {
			return err
		}
		if project, shared := owner(r); !manages(ctx, project) {
			if sees(ctx, project, shared) {
				return problem(http.StatusForbidden, "auth.forbidden", fmt.Sprintf("%s %q is shared with your project to use, not to manage", kind, name))
			}
			return hidden(kind, name)
		}
		return nil
	}
	register(s, huma.Operation{
		OperationID: kind + "-share", Method: http.MethodPost, Path: "/v1/" + kind + "s/{name}/shares", Tags: tags,
		Summary: "Share a " + kind + " with a project", Description: "The project may read and use it (never manage it). Audit share.added.",
		Errors: []int{http.StatusNotFound, http.StatusConflict, http.StatusUnprocessableEntity},
	}, perm, false, func(ctx context.Context, in *struct {
		Name string `path:"name"`
		Body client.Share
	}) (*struct{ Body W }, error) {
		if err := owns(ctx, in.Name); err != nil {
			return nil, err
		}
		if err := checkName("body.project", in.Body.Project); err != nil {
			return nil, err
		}
		if err := s.registry.ShareAdd(ctx, store.Share{Kind: kind, Name: in.Name, Project: in.Body.Project}, principal(ctx).Actor()); err != nil {
			return nil, err
		}
		r, err := get(ctx, in.Name)
		if err != nil {
			return nil, err
		}
		return &struct{ Body W }{Body: wire(ctx, r)}, nil
	})
	register(s, huma.Operation{
		OperationID: kind + "-unshare", Method: http.MethodDelete, Path: "/v1/" + kind + "s/{name}/shares/{project}", Tags: tags,
		Summary: "Take a " + kind + "'s share back", Description: "Audit share.removed. Runs already started keep what they read.",
		DefaultStatus: http.StatusNoContent, Errors: []int{http.StatusNotFound},
	}, perm, false, func(ctx context.Context, in *struct {
		Name    string `path:"name"`
		Project string `path:"project"`
	}) (*struct{}, error) {
		if err := owns(ctx, in.Name); err != nil {
			return nil, err
		}
		return nil, s.registry.ShareRemove(ctx, store.Share{Kind: kind, Name: in.Name, Project: in.Project}, principal(ctx).Actor())
	})
}

// inProject refuses a caller of another project: 404, as for any of its
// objects; and a project that does not exist.
func (s *Server) inProject(ctx context.Context, name string) error {
	if !manages(ctx, name) {
		return hidden("project", name)
	}
	_, err := s.projectStore.ProjectGet(ctx, name)
	return err
}

// bindingKey orders and pages a project's bindings: by kind, then subject.
func bindingKey(b store.Binding) string { return b.Kind + "\x00" + b.Subject }
