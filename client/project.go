package client

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// Project is a team's share of the keeper (GET /v1/projects/{name}).
type Project struct {
	Name        string    `json:"name"`
	Description string    `json:"description"`
	CreatedAt   time.Time `json:"created_at"`
	CreatedBy   string    `json:"created_by"`
	Quota       Quota     `json:"quota" doc:"What the project may hold at once; 0 is no limit."`
}

// Quota bounds what a project holds at once; 0 is no limit. A create
// that would go past it is refused with quota.exceeded before any driver
// is called.
type Quota struct {
	VMs      int `json:"vms" minimum:"0" doc:"VMs alive (made by core.cloud.created and not destroyed) and being made."`
	VCPUs    int `json:"vcpus" minimum:"0" doc:"Their vCPUs, as their profiles' cpus (or vcpus) state."`
	MemoryMB int `json:"memory_mb" minimum:"0" doc:"Their memory, as their profiles' memory_mb states."`
	Runs     int `json:"runs" minimum:"0" doc:"Runs not finished (Pending or Running)."`
}

// ProjectCreate creates a project (POST /v1/projects).
type ProjectCreate struct {
	Name        string `json:"name" doc:"DNS label: lower-case letters, digits and '-', at most 63 characters."`
	Description string `json:"description,omitempty" required:"false" maxLength:"500"`
	Quota       *Quota `json:"quota,omitempty" required:"false" doc:"The project's quota; none when absent."`
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

// Binding gives a group or a person a role in a project: what they get
// when they sign in to it with OIDC.
type Binding struct {
	Project   string    `json:"project" readOnly:"true"`
	Kind      string    `json:"kind" enum:"group,person" doc:"group: a value of the OIDC groups claim; person: one person, by the issuer and subject of their ID token."`
	Subject   string    `json:"subject" minLength:"1" maxLength:"500" doc:"The group's name, or the person's issuer and subject joined by a space."`
	Role      string    `json:"role" enum:"admin,operator,viewer"`
	CreatedAt time.Time `json:"created_at" readOnly:"true"`
	CreatedBy string    `json:"created_by" readOnly:"true"`
}

// BindingPut is the body of PUT /v1/projects/{name}/bindings.
type BindingPut struct {
	Kind    string `json:"kind" enum:"group,person"`
	Subject string `json:"subject" minLength:"1" maxLength:"500"`
	Role    string `json:"role" enum:"admin,operator,viewer"`
}

// BindingList is a project's bindings.
type BindingList struct {
	Items []Binding `json:"items"`
	Next  string    `json:"next"`
}

// BindingPut binds a group or person to a role in project, replacing the
// role they had there.
func (c *Client) BindingPut(ctx context.Context, project string, in BindingPut) (*Binding, error) {
	return call[Binding](ctx, c, http.MethodPut, "/v1/projects/"+esc(project)+"/bindings", nil, in)
}

// BindingList lists project's bindings, every page of them.
func (c *Client) BindingList(ctx context.Context, project string) (*BindingList, error) {
	items, err := allPages(ctx, c, "/v1/projects/"+esc(project)+"/bindings", nil, func(l *BindingList) ([]Binding, string) { return l.Items, l.Next })
	if err != nil {
		return nil, err
	}
	return &BindingList{Items: items}, nil
}

// BindingDelete removes a binding.
func (c *Client) BindingDelete(ctx context.Context, project, kind, subject string) error {
	return c.do(ctx, http.MethodDelete, "/v1/projects/"+esc(project)+"/bindings", url.Values{"kind": {kind}, "subject": {subject}}, nil, nil)
}

// ProjectSetQuota replaces a project's quota.
func (c *Client) ProjectSetQuota(ctx context.Context, project string, q Quota) (*Project, error) {
	return call[Project](ctx, c, http.MethodPut, "/v1/projects/"+esc(project)+"/quota", nil, q)
}

// Share is the body of POST /v1/providers/{name}/shares and
// /v1/profiles/{name}/shares.
type Share struct {
	Project string `json:"project" doc:"The project that may read and use it (never manage it)."`
}

// ProviderShare shares a provider with project.
func (c *Client) ProviderShare(ctx context.Context, name, project string) (*Provider, error) {
	return call[Provider](ctx, c, http.MethodPost, "/v1/providers/"+esc(name)+"/shares", nil, Share{Project: project})
}

// ProviderUnshare takes a provider's share with project back.
func (c *Client) ProviderUnshare(ctx context.Context, name, project string) error {
	return c.do(ctx, http.MethodDelete, "/v1/providers/"+esc(name)+"/shares/"+esc(project), nil, nil, nil)
}

// ProfileShare shares a profile with project.
func (c *Client) ProfileShare(ctx context.Context, name, project string) (*Profile, error) {
	return call[Profile](ctx, c, http.MethodPost, "/v1/profiles/"+esc(name)+"/shares", nil, Share{Project: project})
}

// ProfileUnshare takes a profile's share with project back.
func (c *Client) ProfileUnshare(ctx context.Context, name, project string) error {
	return c.do(ctx, http.MethodDelete, "/v1/profiles/"+esc(name)+"/shares/"+esc(project), nil, nil, nil)
}
