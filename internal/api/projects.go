package api

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/auth"
	"github.com/soulstack/soulstack/internal/store"
)

func projectWire(p store.Project) client.Project {
	return client.Project{Name: p.Name, Description: p.Description, CreatedAt: p.CreatedAt, CreatedBy: p.CreatedBy}
}

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
		p, err := s.store.ProjectCreate(ctx, store.ProjectCreateParams{
			Project: store.Project{Name: in.Body.Name, Description: in.Body.Description}, Actor: principal(ctx).Actor(),
		})
		if err != nil {
			return nil, err
		}
		return &struct{ Body client.Project }{Body: projectWire(p)}, nil
	})

	register(s, huma.Operation{
		OperationID: "project-list", Method: http.MethodGet, Path: "/v1/projects", Tags: tags,
		Summary: "List projects by name",
	}, auth.ProjectManage, false, func(ctx context.Context, in *ListInput) (*struct{ Body client.ProjectList }, error) {
		items, next, err := listPage(ctx, in, s.store.ProjectList, func(p store.Project) string { return p.Name }, projectWire)
		return &struct{ Body client.ProjectList }{Body: client.ProjectList{Items: items, Next: next}}, err
	})

	registerGet[nameInput](s, huma.Operation{
		OperationID: "project-get", Method: http.MethodGet, Path: "/v1/projects/{name}", Tags: tags,
		Summary: "Get a project", Errors: []int{http.StatusNotFound},
	}, auth.ProjectManage, s.store.ProjectGet, projectWire)

	register(s, huma.Operation{
		OperationID: "project-delete", Method: http.MethodDelete, Path: "/v1/projects/{name}", Tags: tags,
		Summary:       "Delete a project",
		Description:   "Audit project.deleted. The default project cannot be deleted (409 project.default).",
		DefaultStatus: http.StatusNoContent, Errors: []int{http.StatusNotFound, http.StatusConflict},
	}, auth.ProjectManage, false, func(ctx context.Context, in *nameInput) (*struct{}, error) {
		if in.Name == store.DefaultProject {
			return nil, problem(http.StatusConflict, "project.default", "the default project always exists; it holds what the keeper held before projects")
		}
		return nil, s.store.ProjectDelete(ctx, store.DeleteParams{Key: in.Name, Actor: principal(ctx).Actor()})
	})
}
