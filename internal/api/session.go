package api

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/auth"
	"github.com/soulstack/soulstack/internal/store"
)

// The web UI signs in with an API token once (POST /v1/session); the
// keeper answers with a session of its own, in two halves that open
// nothing apart:
//
//   - an opaque id in an HttpOnly, SameSite=Strict cookie (__Host- prefixed
//     and Secure over TLS), which page scripts never read, and
//   - a key in the answer's csrf field, which the page keeps in its
//     sessionStorage (its own origin: scheme, host and port) and sends as
//     X-CSRF-Token on every request.
//
// Browsers send cookies to every port of a host, so a page on another
// port may receive the cookie; without the key it opens nothing, and
// neither half is a credential usable as a bearer token. The keeper stores
// both as hashes with the token's id, the session's expiry (SessionTTL)
// and its last use (SessionIdle); DELETE /v1/session and revoking the
// token end it. State-changing requests must also carry an Origin header
// naming the keeper.

// SessionCookie is the name of the web UI's session cookie over plain
// HTTP; SecureSessionCookie over TLS (the __Host- prefix: Secure, Path=/,
// no Domain, so no other host can set it).
const (
	SessionCookie       = "soulstack_session"
	SecureSessionCookie = "__Host-soulstack_session"
)

// CSRFHeader is the header that carries the session's key.
const CSRFHeader = "X-CSRF-Token"

// How long a session lasts: SessionTTL from sign-in at most, SessionIdle
// without a request; its last use is recorded at most every touchEvery.
const (
	SessionTTL  = 12 * time.Hour
	SessionIdle = time.Hour
	touchEvery  = time.Minute
)

// sessionHash and keyHash are what the registry stores of a session's
// id and key.
func sessionHash(id string) string   { return domainHash("soulstack.session.v1\x00", id) }
func sessionKeyHash(k string) string { return domainHash("soulstack.session-key.v1\x00", k) }

func domainHash(domain, v string) string {
	sum := sha256.Sum256([]byte(domain + v))
	return hex.EncodeToString(sum[:])
}

// randomSecret is 32 random bytes, URL-safe.
func randomSecret() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("session: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// sessionError is a cookie that names no live session, or a session
// request without its key.
type sessionError struct{ reason string }

func (e *sessionError) Error() string { return e.reason + "; sign in again" }

// csrfError refuses a cookie-authenticated request that changes state
// without proof that the keeper's own page sent it.
type csrfError struct{ reason string }

func (e *csrfError) Error() string {
	return "cross-site request refused: " + e.reason + "; requests authenticated by the session cookie must come from the keeper's own page"
}

type sessionKey struct{}

// sessionID returns the session id of a request the session cookie
// authenticated, or "" for a bearer token.
func sessionID(ctx context.Context) string {
	t, _ := ctx.Value(sessionKey{}).(string)
	return t
}

// sessionCookieValue is the request's session cookie, if any.
func sessionCookieValue(cookie func(string) (*http.Cookie, error)) string {
	for _, name := range []string{SecureSessionCookie, SessionCookie} {
		if c, err := cookie(name); err == nil && c.Value != "" {
			return c.Value
		}
	}
	return ""
}

// permitSession authenticates a session cookie with its key and checks
// perm. A failure does not spend the client address's budget: a session's
// id and key are 256 random bits each, nothing a client can guess, and a
// browser that sends the cookie without the key (a page of another port,
// a tab that lost its key) must not lock its user out of signing in.
func (s *Server) permitSession(ctx context.Context, id, key string, perm auth.Permission) (auth.Principal, *client.Problem) {
	p, err := s.session(ctx, id, key)
	return s.granted(p, err, perm, "session check failed")
}

// session is the principal of session id with key: the session must
// exist, match the key, be within SessionTTL and SessionIdle, and its
// token be active.
func (s *Server) session(ctx context.Context, id, key string) (auth.Principal, error) {
	ws, err := s.tokenStore.SessionGet(ctx, sessionHash(id))
	if errors.Is(err, store.ErrNotFound) {
		return auth.Principal{}, &sessionError{"the session cookie names no session"}
	}
	if err != nil {
		return auth.Principal{}, err
	}
	if key == "" {
		return auth.Principal{}, &sessionError{"a session request needs its key in " + CSRFHeader + " (the cookie alone opens nothing)"}
	}
	if subtle.ConstantTimeCompare([]byte(sessionKeyHash(key)), []byte(ws.KeyHash)) != 1 {
		return auth.Principal{}, &sessionError{CSRFHeader + " is not this session's key"}
	}
	now := s.now()
	switch {
	case !now.Before(ws.ExpiresAt):
		return auth.Principal{}, &sessionError{"the session expired at " + ws.ExpiresAt.Format(time.RFC3339)}
	case now.Sub(ws.LastSeenAt) >= SessionIdle:
		return auth.Principal{}, &sessionError{fmt.Sprintf("the session was idle for more than %s", SessionIdle)}
	}
	t, err := s.tokenStore.TokenGet(ctx, ws.TokenID)
	if errors.Is(err, store.ErrNotFound) || err == nil && !t.Active(now) {
		return auth.Principal{}, &sessionError{"the session's token is revoked or expired"}
	}
	if err != nil {
		return auth.Principal{}, err
	}
	if now.Sub(ws.LastSeenAt) >= touchEvery {
		if err := s.tokenStore.SessionTouch(ctx, ws.Hash, now); err != nil {
			s.log.Warn("record a session's use", "err", err)
		}
	}
	return auth.PrincipalOf(t), nil
}

// startSession stores a new web UI session of token tokenID, lasting
// SessionTTL or until the token expires (tokenExpires, nil: never), and
// returns its id and key.
func (s *Server) startSession(ctx context.Context, tokenID string, tokenExpires *time.Time) (id, key string, err error) {
	if id, err = randomSecret(); err != nil {
		return "", "", err
	}
	if key, err = randomSecret(); err != nil {
		return "", "", err
	}
	now := s.now()
	end := now.Add(SessionTTL)
	if tokenExpires != nil && tokenExpires.Before(end) {
		end = *tokenExpires
	}
	err = s.tokenStore.SessionCreate(ctx, store.WebSession{Hash: sessionHash(id), KeyHash: sessionKeyHash(key), TokenID: tokenID,
		CreatedAt: now, ExpiresAt: end, LastSeenAt: now})
	return id, key, err
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

func sessionWire(p auth.Principal, via string) client.Session {
	out := client.Session{ID: p.TokenID, Name: p.Name, Role: p.Role, Permissions: permissionNames(p.Effective()), Via: via}
	out.Person = personWire(p.Person)
	out.Project = p.Project
	if out.Permissions == nil {
		out.Permissions = []string{}
	}
	return out
}

// sessionCookie is the cookie that holds session id (an empty id with
// MaxAge -1 clears it).
func sessionCookie(id string, secure bool) http.Cookie {
	name := SessionCookie
	if secure {
		name = SecureSessionCookie
	}
	c := http.Cookie{Name: name, Value: id, Path: "/", HttpOnly: true, Secure: secure, SameSite: http.SameSiteStrictMode, MaxAge: int(SessionTTL / time.Second)}
	if id == "" {
		c.MaxAge = -1
	}
	return c
}

// browserRequest is what the session routes learn from the request
// itself.
type browserRequest struct {
	host    string // the client's address, for the failed-authentication budget
	secure  bool   // reached over TLS: the cookie gets Secure
	session string // the session cookie's id, if any
	key     string // the session's key (CSRFHeader), if any
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
	next(huma.WithValue(ctx, browserKey{}, browserRequest{host: hostOf(ctx.RemoteAddr()), secure: ctx.TLS() != nil,
		session: sessionCookieValue(func(name string) (*http.Cookie, error) { return huma.ReadCookie(ctx, name) }), key: ctx.Header(CSRFHeader)}))
}

type sessionOutput struct {
	SetCookie http.Cookie `header:"Set-Cookie"`
	Body      client.Session
}

func (s *Server) registerSession() {
	tags := []string{"session"}
	register(s, huma.Operation{
		OperationID: "whoami", Method: http.MethodGet, Path: "/v1/whoami", Tags: tags,
		Summary:     "Who the caller is: the token's id, name, role and permissions",
		Description: "via says whether a bearer token or a web UI session authenticated the request.",
	}, auth.Authenticated, false, func(ctx context.Context, _ *struct{}) (*struct{ Body client.Session }, error) {
		via := "bearer"
		if sessionID(ctx) != "" {
			via = "cookie"
		}
		return &struct{ Body client.Session }{Body: sessionWire(principal(ctx), via)}, nil
	})

	register(s, huma.Operation{
		OperationID: "logout", Method: http.MethodPost, Path: "/v1/auth/logout", Tags: tags,
		Summary: "Revoke the calling token",
		Description: "Revokes the token that authenticates the request (audit token.revoked by the token itself): every session of it ends and it opens nothing any more, " +
			"wherever it is used. soulctl logout calls it for the token soulctl login kept. Refused with 409 token.last_admin for the last active admin token. " +
			"A web UI session must send its key (" + CSRFHeader + ") and come from the keeper's own page, as for any write.",
		DefaultStatus: http.StatusNoContent, Errors: []int{http.StatusUnauthorized, http.StatusConflict},
	}, auth.Authenticated, false, func(ctx context.Context, _ *struct{}) (*struct{}, error) {
		p := principal(ctx)
		if err := s.tokenStore.TokenRevoke(ctx, store.DeleteParams{Key: p.TokenID, Actor: p.Actor()}); err != nil {
			return nil, err
		}
		s.authn.Forget(p.TokenID)
		return nil, nil
	})
	s.registerWebSession()
}

// registerWebSession registers the web UI's session: sign in with a token, sign out.
func (s *Server) registerWebSession() {
	tags := []string{"session"}
	register(s, huma.Operation{
		OperationID: "session-create", Method: http.MethodPost, Path: "/v1/session", Tags: tags,
		Summary: "Sign in to the web UI with an API token",
		Description: "Verifies the token as every route does and starts a session: an opaque id in the " + SecureSessionCookie +
			" cookie over TLS (" + SessionCookie + " over plain HTTP; HttpOnly, SameSite=Strict, Path=/), and its key in csrf, " +
			"which the page must send as " + CSRFHeader + " on every request: the cookie alone opens nothing, and neither is the token, " +
			"which is never returned. The session lasts " + SessionTTL.String() + " at most and ends after " + SessionIdle.String() +
			" unused, at DELETE /v1/session, or when the token is revoked (audit session.created). " +
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
		id, key, err := s.startSession(ctx, p.TokenID, nil)
		if err != nil {
			return nil, err
		}
		s.log.Info("web UI sign-in", "token_id", p.TokenID)
		out := sessionWire(p, "cookie")
		out.CSRF = key
		return &sessionOutput{SetCookie: sessionCookie(id, br.secure), Body: out}, nil
	})

	register(s, huma.Operation{
		OperationID: "session-delete", Method: http.MethodDelete, Path: "/v1/session", Tags: tags,
		Summary:       "Sign out of the web UI",
		Description:   "Ends the session (audit session.deleted) and clears its cookie. It needs the session's key, and only the keeper's own page may call it (Origin).",
		DefaultStatus: http.StatusNoContent,
		Errors:        []int{http.StatusUnauthorized, http.StatusForbidden},
		Middlewares:   huma.Middlewares{s.sameOrigin},
	}, auth.Authenticated, true, func(ctx context.Context, _ *struct{}) (*struct {
		SetCookie http.Cookie `header:"Set-Cookie"`
	}, error) {
		br, _ := ctx.Value(browserKey{}).(browserRequest)
		if br.session != "" {
			p, prob := s.permitSession(ctx, br.session, br.key, auth.Authenticated)
			if prob != nil {
				return nil, prob
			}
			if err := s.tokenStore.SessionDelete(ctx, sessionHash(br.session), p.Actor()); err != nil && !errors.Is(err, store.ErrNotFound) {
				return nil, err
			}
		}
		return &struct {
			SetCookie http.Cookie `header:"Set-Cookie"`
		}{SetCookie: sessionCookie("", br.secure)}, nil
	})
}
