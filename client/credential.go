package client

import (
	"context"
	"net/http"
	"time"
)

// Credential is a secret in a project's credentials registry, as the API
// shows it: its name, never its value. Providers and souls of the project
// reference it as credential:NAME (credentials_ref, key_ref).
type Credential struct {
	Project   string    `json:"project" readOnly:"true"`
	Name      string    `json:"name" readOnly:"true"`
	Ref       string    `json:"ref" readOnly:"true" doc:"The reference a provider or soul of the project names it by."`
	CreatedAt time.Time `json:"created_at" readOnly:"true"`
	CreatedBy string    `json:"created_by" readOnly:"true"`
}

// CredentialPut is the body of PUT /v1/projects/{name}/credentials/{credential}.
type CredentialPut struct {
	Value string `json:"value" minLength:"1" maxLength:"65536" doc:"The secret: sealed with the data key, never shown again."`
}

// CredentialList is a project's credentials.
type CredentialList struct {
	Items []Credential `json:"items"`
}

// CredentialPut stores (or replaces) a secret in project's credentials
// registry.
func (c *Client) CredentialPut(ctx context.Context, project, name, value string) (*Credential, error) {
	return call[Credential](ctx, c, http.MethodPut, "/v1/projects/"+esc(project)+"/credentials/"+esc(name), nil, CredentialPut{Value: value})
}

// CredentialList lists project's credentials (names only).
func (c *Client) CredentialList(ctx context.Context, project string) (*CredentialList, error) {
	return call[CredentialList](ctx, c, http.MethodGet, "/v1/projects/"+esc(project)+"/credentials", nil, nil)
}

// CredentialDelete deletes one of project's credentials.
func (c *Client) CredentialDelete(ctx context.Context, project, name string) error {
	return c.do(ctx, http.MethodDelete, "/v1/projects/"+esc(project)+"/credentials/"+esc(name), nil, nil, nil)
}

// ProjectSSHKey is a project's keeper SSH public key: what its souls
// without a key_ref are reached with, and what its VMs' userdata
// authorizes. A host the project's souls live on trusts it.
type ProjectSSHKey struct {
	Project   string `json:"project"`
	PublicKey string `json:"public_key" doc:"The authorized_keys line."`
}

// ProjectSSHKey returns project's keeper SSH public key.
func (c *Client) ProjectSSHKey(ctx context.Context, project string) (*ProjectSSHKey, error) {
	return call[ProjectSSHKey](ctx, c, http.MethodGet, "/v1/projects/"+esc(project)+"/ssh-key", nil, nil)
}
