package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"

	"github.com/danielgtaylor/huma/v2"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/auth"
)

// The web UI signs in with an API token, which the keeper keeps in an
// HttpOnly, SameSite=Strict cookie: page scripts never read it. Requests
// the cookie authenticates are held to two more checks when they change
// state (any method but GET, HEAD and OPTIONS):
//
//   - the Origin header must be the keeper's own origin, and
//   - the X-CSRF-Token header must carry the session's CSRF value, which
//     only a same-origin page can learn (GET /v1/whoami; the API serves no
//     CORS headers, so other origins cannot read it).
//
// The CSRF value is a one-way function of the token, so every keeper
// sharing the database accepts the same session and nothing is stored.
// Bearer-token requests are not affected: a browser never attaches an
// Authorization header to a cross-site request by itself.

// SessionCookie is the name of the web UI's session cookie.
const SessionCookie = "soulstack_session"

// CSRFHeader is the header a cookie session's state-changing requests carry.
const CSRFHeader = "X-CSRF-Token"

// csrfDomain separates the CSRF value from every other hash of a token
// (the registry stores HashToken).
const csrfDomain = "soulstack.csrf.v1\x00"

// CSRFFor returns the CSRF value of a session whose cookie holds token.
func CSRFFor(token string) string {
	sum := sha256.Sum256([]byte(csrfDomain + token))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// csrfError refuses a cookie-authenticated request that changes state
// without proof that the keeper's own page sent it.
type csrfError struct{ reason string }

func (e *csrfError) Error() string {
	return "cross-site request refused: " + e.reason + "; requests authenticated by the session cookie must come from the keeper's own page"
}

type sessionKey struct{}

// sessionToken returns the token of a request authenticated by the
// session cookie, or "" for a bearer token.
func sessionToken(ctx context.Context) string {
	t, _ := ctx.Value(sessionKey{}).(string)
	return t
}

// credential returns the Authorization header to authenticate: the
// request's own, or else one made of the session cookie, with the
// cookie's token (empty when the header was used).
func credential(header string, cookie func() (*http.Cookie, error)) (string, string) {
	if header != "" {
		return header, ""
	}
	c, err := cookie()
	if err != nil || c.Value == "" {
		return "", ""
	}
	return "Bearer " + c.Value, c.Value
}

// safeMethod reports whether a method does not change state.
func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// ownOrigin is the keeper's origin as this request reached it.
func ownOrigin(ctx huma.Context) string {
	scheme := "http"
	if ctx.TLS() != nil {
		scheme = "https"
	}
	return scheme + "://" + strings.ToLower(ctx.Host())
}

// checkOrigin refuses a browser request sent by another origin: Origin
// must name the keeper, and a browser that says where the request comes
// from (Sec-Fetch-Site) must say same-origin.
func checkOrigin(ctx huma.Context) error {
	origin := ctx.Header("Origin")
	if origin == "" {
		return &csrfError{reason: "no Origin header"}
	}
	u, err := url.Parse(origin)
	if err != nil || u.Scheme+"://"+strings.ToLower(u.Host) != ownOrigin(ctx) {
		return &csrfError{reason: "Origin " + origin + " is not this keeper's origin " + ownOrigin(ctx)}
	}
	if site := ctx.Header("Sec-Fetch-Site"); site != "" && site != "same-origin" {
		return &csrfError{reason: "Sec-Fetch-Site is " + site}
	}
	return nil
}

// checkCSRF applies the cross-site checks to a state-changing request the
// session cookie authenticated.
func checkCSRF(ctx huma.Context, token string) error {
	if err := checkOrigin(ctx); err != nil {
		return err
	}
	got := ctx.Header(CSRFHeader)
	if got == "" {
		return &csrfError{reason: "no " + CSRFHeader + " header"}
	}
	if subtle.ConstantTimeCompare([]byte(got), []byte(CSRFFor(token))) != 1 {
		return &csrfError{reason: CSRFHeader + " does not match the session"}
	}
	return nil
}

func sessionWire(p auth.Principal, token string) client.Session {
	out := client.Session{ID: p.TokenID, Name: p.Name, Role: p.Role, Permissions: permissionNames(p.Grant.Effective()), Via: "bearer"}
	if token != "" {
		out.Via, out.CSRF = "cookie", CSRFFor(token)
	}
	if out.Permissions == nil {
		out.Permissions = []string{}
	}
	return out
}

// sessionCookie is the cookie that holds token (an empty token with
// MaxAge -1 clears it).
func sessionCookie(token string, secure bool) http.Cookie {
	c := http.Cookie{Name: SessionCookie, Value: token, Path: "/", HttpOnly: true, Secure: secure, SameSite: http.SameSiteStrictMode}
	if token == "" {
		c.MaxAge = -1
	}
	return c
}

// browserRequest is what the session routes learn from the request
// itself.
type browserRequest struct {
	host   string // the client's address, for the failed-authentication budget
	secure bool   // reached over TLS: the cookie gets Secure
}

type browserKey struct{}

// sameOrigin refuses a session route called by another origin (login
// CSRF: a page signing its victim into the attacker's token).
func (s *Server) sameOrigin(ctx huma.Context, next func(huma.Context)) {
	if err := checkOrigin(ctx); err != nil {
		prob, _ := problemFor(err)
		s.writeHumaProblem(ctx, prob)
		return
	}
	next(huma.WithValue(ctx, browserKey{}, browserRequest{host: hostOf(ctx.RemoteAddr()), secure: ctx.TLS() != nil}))
}

type sessionOutput struct {
	SetCookie http.Cookie `header:"Set-Cookie"`
	Body      client.Session
}

func (s *Server) registerSession() {
	tags := []string{"session"}
	register(s, huma.Operation{
		OperationID: "whoami", Method: http.MethodGet, Path: "/v1/whoami", Tags: tags,
		Summary: "Who the caller is: the token's id, name, role and permissions",
		Description: "With the web UI's session cookie the answer also carries csrf, the value the session's " +
			"state-changing requests must send as X-CSRF-Token (with an Origin header naming the keeper).",
	}, auth.Authenticated, false, func(ctx context.Context, _ *struct{}) (*struct{ Body client.Session }, error) {
		return &struct{ Body client.Session }{Body: sessionWire(principal(ctx), sessionToken(ctx))}, nil
	})

	register(s, huma.Operation{
		OperationID: "session-create", Method: http.MethodPost, Path: "/v1/session", Tags: tags,
		Summary: "Sign in to the web UI with an API token",
		Description: "Verifies the token as every route does and sets it in the " + SessionCookie + " cookie " +
			"(HttpOnly, SameSite=Strict, Path=/, Secure over TLS); the token is never returned. " +
			"Only the keeper's own page may call it: the Origin header must name the keeper (403 auth.csrf_failed otherwise). " +
			"401 auth.invalid_token for a bad token; failed attempts count against the client address's budget (429 auth.rate_limited).",
		Errors:      []int{http.StatusUnauthorized, http.StatusForbidden, http.StatusTooManyRequests},
		Middlewares: huma.Middlewares{s.sameOrigin},
	}, auth.Authenticated, true, func(ctx context.Context, in *struct{ Body client.SessionCreate }) (*sessionOutput, error) {
		br, _ := ctx.Value(browserKey{}).(browserRequest)
		token := strings.TrimSpace(in.Body.Token)
		p, prob := s.permit(ctx, br.host, "Bearer "+token, auth.Authenticated)
		if prob != nil {
			return nil, prob
		}
		s.log.Info("web UI sign-in", "token_id", p.TokenID)
		return &sessionOutput{SetCookie: sessionCookie(token, br.secure), Body: sessionWire(p, token)}, nil
	})

	register(s, huma.Operation{
		OperationID: "session-delete", Method: http.MethodDelete, Path: "/v1/session", Tags: tags,
		Summary:       "Sign out of the web UI",
		Description:   "Clears the session cookie. Only the keeper's own page may call it (Origin).",
		DefaultStatus: http.StatusNoContent,
		Errors:        []int{http.StatusForbidden},
		Middlewares:   huma.Middlewares{s.sameOrigin},
	}, auth.Authenticated, true, func(ctx context.Context, _ *struct{}) (*struct {
		SetCookie http.Cookie `header:"Set-Cookie"`
	}, error) {
		br, _ := ctx.Value(browserKey{}).(browserRequest)
		return &struct {
			SetCookie http.Cookie `header:"Set-Cookie"`
		}{SetCookie: sessionCookie("", br.secure)}, nil
	})
}
