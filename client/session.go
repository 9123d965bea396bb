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
}

// Whoami returns the token the client uses: its id, name, role and every
// permission it holds (GET /v1/whoami).
func (c *Client) Whoami(ctx context.Context) (*Session, error) {
	return call[Session](ctx, c, http.MethodGet, "/v1/whoami", nil, nil)
}
