package client

import (
	"context"
	"net/http"
)

// SessionCreate is the body of POST /v1/session: the web UI's sign-in.
type SessionCreate struct {
	Token string `json:"token" minLength:"1" maxLength:"200" doc:"An API token (sst_…). It is kept in an HttpOnly cookie and never returned."`
}

// Session is who the caller is (GET /v1/whoami, POST /v1/session): the
// token's id, name, role and every permission it holds. Via says how the
// request was authenticated; CSRF, only for a cookie session, is the value
// every state-changing request of that session must carry in the
// X-CSRF-Token header.
type Session struct {
	ID          string   `json:"id" doc:"The token's id (tok_…); the actor id in the audit log."`
	Name        string   `json:"name"`
	Role        string   `json:"role" enum:"admin,operator,viewer,custom"`
	Permissions []string `json:"permissions" doc:"Every permission the token holds."`
	Via         string   `json:"via" enum:"bearer,cookie" doc:"How this request was authenticated."`
	CSRF        string   `json:"csrf,omitempty" required:"false" doc:"Only for a cookie session: send it as X-CSRF-Token on every POST, PUT, PATCH and DELETE."`
	Person      *Person  `json:"person,omitempty" required:"false" doc:"Who signed in with OIDC to get the token; absent for a token minted by hand."`
	Project     string   `json:"project,omitempty" required:"false" doc:"The one project the token acts in; absent for a keeper-wide token."`
}

// Person is someone who signed in with OIDC.
type Person struct {
	Issuer  string `json:"issuer" doc:"The OIDC issuer of the person's ID token."`
	Subject string `json:"subject" doc:"The subject (sub) of the person's ID token: with issuer, who the person is."`
	Name    string `json:"name" doc:"The person's name, as the provider gave it (name, else email, else preferred_username)."`
}

// Whoami returns the token the client uses: its id, name, role and every
// permission it holds (GET /v1/whoami).
func (c *Client) Whoami(ctx context.Context) (*Session, error) {
	return call[Session](ctx, c, http.MethodGet, "/v1/whoami", nil, nil)
}

// AuthMethods says how a keeper signs people in (GET /v1/auth/methods).
type AuthMethods struct {
	OIDC bool `json:"oidc" doc:"People may sign in with the keeper's OpenID Connect provider: GET /v1/auth/oidc/login."`
}

// OIDCCodeExchange is soulctl login's one-time code and the PKCE verifier
// of its challenge (POST /v1/auth/oidc/token).
type OIDCCodeExchange struct {
	Code     string `json:"code" maxLength:"128" doc:"The one-time code the keeper sent to soulctl's loopback listener."`
	Verifier string `json:"verifier" minLength:"43" maxLength:"128" doc:"The PKCE verifier whose S256 challenge soulctl sent with the login."`
}

// OIDCCodeExchange exchanges a login code for the person's token.
func (c *Client) OIDCCodeExchange(ctx context.Context, in OIDCCodeExchange) (*TokenCreated, error) {
	return call[TokenCreated](ctx, c, http.MethodPost, "/v1/auth/oidc/token", nil, in)
}

// Logout revokes the token the client uses (POST /v1/auth/logout).
func (c *Client) Logout(ctx context.Context) error {
	return c.do(ctx, http.MethodPost, "/v1/auth/logout", nil, nil, nil)
}

// Version is a keeper's build: its version (a release, or a commit for a
// development build), its release and the Go it was built with.
type Version struct {
	Version string `json:"version" doc:"The build's version: its release, or a commit (with +dirty) for a development build."`
	Release string `json:"release" doc:"The release the source tree is."`
	Go      string `json:"go" doc:"The Go toolchain the keeper was built with."`
}

// Version returns the keeper's version.
func (c *Client) Version(ctx context.Context) (*Version, error) {
	return call[Version](ctx, c, http.MethodGet, "/v1/version", nil, nil)
}
