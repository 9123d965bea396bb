package client

import (
	"context"
	"net/http"
	"time"
)

// Project is a team's share of the keeper (GET /v1/projects/{name}).
type Project struct {
	Name        string    `json:"name"`
	Description string    `json:"description"`
	CreatedAt   time.Time `json:"created_at"`
	CreatedBy   string    `json:"created_by"`
}

// ProjectCreate creates a project (POST /v1/projects).
type ProjectCreate struct {
	Name        string `json:"name" doc:"DNS label: lower-case letters, digits and '-', at most 63 characters."`
	Description string `json:"description,omitempty" required:"false" maxLength:"500"`
}

// ProjectList is a page of projects.
type ProjectList struct {
	Items []Project `json:"items"`
	Next  string    `json:"next" doc:"Cursor for the next page (pass as ?after=); empty on the last page."`
}

// ProjectCreate creates a project.
func (c *Client) ProjectCreate(ctx context.Context, in ProjectCreate) (*Project, error) {
	return call[Project](ctx, c, http.MethodPost, "/v1/projects", nil, in)
}

// ProjectGet returns one project.
func (c *Client) ProjectGet(ctx context.Context, name string) (*Project, error) {
	return call[Project](ctx, c, http.MethodGet, "/v1/projects/"+esc(name), nil, nil)
}

// ProjectList returns a page of projects.
func (c *Client) ProjectList(ctx context.Context, o ListOptions) (*ProjectList, error) {
	return call[ProjectList](ctx, c, http.MethodGet, "/v1/projects", o.query(), nil)
}

// ProjectDelete deletes a project (never the default one).
func (c *Client) ProjectDelete(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/v1/projects/"+esc(name), nil, nil, nil)
}
