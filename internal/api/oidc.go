package api

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/danielgtaylor/huma/v2"
	"golang.org/x/oauth2"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/access"
	"github.com/soulstack/soulstack/internal/auth"
	"github.com/soulstack/soulstack/internal/store"
)

// People sign in to the web UI with the company's OpenID Connect provider:
//
//  1. GET /v1/auth/oidc/login sends the browser to the provider with an
//     authorization code request (state, nonce, PKCE S256). What the
//     callback must match is sealed with the data key into a short-lived
//     cookie (Path /v1/auth/oidc/, SameSite=Lax so that the provider's
//     redirect back carries it): no keeper-side state, any keeper of a
//     fleet can take the callback.
//  2. GET /v1/auth/oidc/callback checks the state, exchanges the code with
//     the PKCE verifier, verifies the ID token (signature by the issuer's
//     keys, issuer, audience = the keeper's client, expiry, the nonce of
//     this sign-in), maps the groups claim to a role, mints a token for the
//     person that expires with the sign-in (audit token.created, actor
//     oidc, with the person) and starts a web UI session for it as POST
//     /v1/session does; the session's key travels to the page in the URL
//     fragment, which browsers never send to a server.

// OIDCConfig configures the sign-in (Config.OIDC; nil: off).
type OIDCConfig struct {
	Issuer, ClientID, ClientSecret, RedirectURL string
	Scopes                                      []string
	GroupsClaim                                 string
	// Roles maps a group to a keeper-wide role; the strongest of a
	// person's wins.
	Roles map[string]string
	// Projects maps a project to its groups' roles there (keeper.yml);
	// bindings made through the API add to them.
	Projects map[string]map[string]string
	// TokenTTL is the lifetime of a sign-in's token.
	TokenTTL time.Duration
	// Seal and Open protect the sign-in cookie (the data key's sealer).
	Seal func([]byte) string
	Open func(string) ([]byte, error)
	// HTTPClient talks to the provider; nil: one with a 10 s timeout.
	HTTPClient *http.Client
}

// AccessRoles is the sign-in's say over people's roles, for the access
// service; nil when c is (sign-in off).
func (c *OIDCConfig) AccessRoles() *access.Roles {
	if c == nil {
		return nil
	}
	return &access.Roles{Issuer: c.Issuer, Keeper: c.Roles, Projects: c.Projects}
}

// oidcCookie holds a sign-in in progress between login and callback.
const oidcCookie = "soulstack_oidc"

const oidcPurpose = "soulstack.oidc-login.v1"

// oidcLoginTTL is how long a sign-in may take at the provider.
const oidcLoginTTL = 10 * time.Minute

// pendingLogin is what the sign-in cookie seals.
type pendingLogin struct {
	Purpose  string    `json:"purpose"` // oidcPurpose: no other sealed value passes for one
	State    string    `json:"state"`
	Nonce    string    `json:"nonce"`
	Verifier string    `json:"verifier"`
	ReturnTo string    `json:"return_to"`
	Expires  time.Time `json:"expires"`
	// Project is the project the person asked to sign in to; empty: their
	// keeper-wide role, else the first project they have a role in.
	Project string `json:"project,omitempty"`
	// A soulctl login: where its loopback listener waits, its PKCE
	// challenge for the one-time code, and its own state.
	CLIRedirect  string `json:"cli_redirect,omitempty"`
	CLIChallenge string `json:"cli_challenge,omitempty"`
	CLIState     string `json:"cli_state,omitempty"`
}

// cliCode is what a soulctl login's one-time code stands for, sealed.
type cliCode struct {
	Purpose   string       `json:"purpose"` // cliCodePurpose
	Person    store.Person `json:"person"`
	Groups    []string     `json:"groups"`
	Role      string       `json:"role"`
	Project   string       `json:"project,omitempty"`
	Challenge string       `json:"challenge"`
}

const cliCodePurpose = "soulstack.oidc-cli-code.v1"

// cliCodeTTL is how long soulctl has to exchange its code.
const cliCodeTTL = 2 * time.Minute

var pkceValue = regexp.MustCompile(`^[A-Za-z0-9._~-]{43,128}$`)

// oidcFlow is the sign-in's provider side, discovered on first use (the
// keeper starts while its provider is down, and tries again at the next
// sign-in).
type oidcFlow struct {
	cfg OIDCConfig

	mu       sync.Mutex
	oauth    *oauth2.Config
	verifier *oidc.IDTokenVerifier
}

func newOIDCFlow(cfg *OIDCConfig) *oidcFlow {
	if cfg == nil {
		return nil
	}
	return &oidcFlow{cfg: *cfg}
}

func (f *oidcFlow) httpContext(ctx context.Context) context.Context {
	c := f.cfg.HTTPClient
	if c == nil {
		c = &http.Client{Timeout: 10 * time.Second}
	}
	return oidc.ClientContext(ctx, c)
}

// discover returns the provider's endpoints and ID token verifier.
func (f *oidcFlow) discover(ctx context.Context) (*oauth2.Config, *oidc.IDTokenVerifier, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.oauth != nil {
		return f.oauth, f.verifier, nil
	}
	ctx, cancel := context.WithTimeout(f.httpContext(ctx), 10*time.Second)
	defer cancel()
	p, err := oidc.NewProvider(ctx, f.cfg.Issuer)
	if err != nil {
		return nil, nil, fmt.Errorf("discover the OIDC provider %s: %w", f.cfg.Issuer, err)
	}
	f.oauth = &oauth2.Config{ClientID: f.cfg.ClientID, ClientSecret: f.cfg.ClientSecret, Endpoint: p.Endpoint(), RedirectURL: f.cfg.RedirectURL, Scopes: f.cfg.Scopes}
	f.verifier = p.Verifier(&oidc.Config{ClientID: f.cfg.ClientID})
	return f.oauth, f.verifier, nil
}

// oidcError is a sign-in that failed; code is stable.
type oidcError struct {
	status        int
	code, message string
}

func (e *oidcError) Error() string { return e.code + ": " + e.message }

func (s *Server) registerOIDC() {
	register(s, huma.Operation{
		OperationID: "auth-methods", Method: http.MethodGet, Path: "/v1/auth/methods", Tags: []string{"session"},
		Summary:     "How this keeper signs people in",
		Description: "oidc: people may sign in to the web UI with the keeper's OpenID Connect provider (GET /v1/auth/oidc/login). No token needed.",
	}, auth.Authenticated, true, func(context.Context, *struct{}) (*struct{ Body client.AuthMethods }, error) {
		return &struct{ Body client.AuthMethods }{Body: client.AuthMethods{OIDC: s.oidc != nil}}, nil
	})
	if s.oidc == nil {
		return
	}
	s.mux.HandleFunc("GET /v1/auth/oidc/login", s.oidcLogin)
	s.mux.HandleFunc("GET /v1/auth/oidc/callback", s.oidcCallback)
	register(s, huma.Operation{
		OperationID: "oidc-token", Method: http.MethodPost, Path: "/v1/auth/oidc/token", Tags: []string{"session"},
		Summary: "Exchange a soulctl login's one-time code for the person's token",
		Description: "soulctl login opens GET /v1/auth/oidc/login?cli_redirect=http://127.0.0.1:PORT/…&cli_challenge=S256(verifier)&cli_state=…; " +
			"after the sign-in at the identity provider the keeper sends the browser to cli_redirect with a one-time code (valid " + cliCodeTTL.String() + "), " +
			"which soulctl exchanges here with its PKCE verifier for a token of the person (audit token.created by oidc, naming the person; it expires with the sign-in). " +
			"A code is good once: 401 auth.oidc_code for one unknown, used, expired, or with another verifier. No API token needed.",
		Errors: []int{http.StatusUnauthorized},
	}, auth.Authenticated, true, s.exchangeCLICode)
}

// oidcLogin starts a sign-in: GET /v1/auth/oidc/login[?return_to=/ui/…].
func (s *Server) oidcLogin(w http.ResponseWriter, r *http.Request) {
	returnTo := r.URL.Query().Get("return_to")
	if returnTo == "" {
		returnTo = "/ui/"
	}
	if !localUIPath(returnTo) {
		s.writeProblem(w, problem(http.StatusBadRequest, "auth.oidc_return_invalid", "return_to must be a path of the web UI (/ui/…)"))
		return
	}
	oc, _, err := s.oidc.discover(r.Context())
	if err != nil {
		s.log.Warn("OIDC sign-in", "err", err)
		s.writeProblem(w, problem(http.StatusBadGateway, "auth.oidc_unavailable", "the identity provider cannot be reached; try again"))
		return
	}
	state, err1 := randomSecret()
	nonce, err2 := randomSecret()
	if err := errors.Join(err1, err2); err != nil {
		s.writeProblem(w, problem(http.StatusInternalServerError, "internal", err.Error()))
		return
	}
	p := pendingLogin{Purpose: oidcPurpose, State: state, Nonce: nonce, Verifier: oauth2.GenerateVerifier(), ReturnTo: returnTo, Expires: s.now().Add(oidcLoginTTL),
		Project: r.URL.Query().Get("project")}
	if p.Project != "" && checkName("query.project", p.Project) != nil {
		s.writeProblem(w, problem(http.StatusBadRequest, "auth.oidc_project_invalid", "project must be a project's name"))
		return
	}
	if q := r.URL.Query(); q.Get("cli_redirect") != "" {
		p.CLIRedirect, p.CLIChallenge, p.CLIState = q.Get("cli_redirect"), q.Get("cli_challenge"), q.Get("cli_state")
		if !loopbackRedirect(p.CLIRedirect) {
			s.writeProblem(w, problem(http.StatusBadRequest, "auth.oidc_return_invalid", "cli_redirect must be http://127.0.0.1:PORT/… or http://[::1]:PORT/… (soulctl login's own listener)"))
			return
		}
		if !pkceValue.MatchString(p.CLIChallenge) || len(p.CLIState) > 128 {
			s.writeProblem(w, problem(http.StatusBadRequest, "auth.oidc_challenge_invalid", "cli_challenge must be an S256 PKCE challenge (43 to 128 URL-safe characters), cli_state at most 128 characters"))
			return
		}
	}
	b, _ := json.Marshal(p)
	http.SetCookie(w, &http.Cookie{Name: oidcCookie, Value: s.oidc.cfg.Seal(b), Path: "/v1/auth/oidc/", HttpOnly: true, Secure: r.TLS != nil,
		SameSite: http.SameSiteLaxMode, MaxAge: int(oidcLoginTTL / time.Second)})
	http.Redirect(w, r, oc.AuthCodeURL(state, oidc.Nonce(nonce), oauth2.S256ChallengeOption(p.Verifier)), http.StatusFound)
}

// loopbackRedirect reports whether u is a loopback listener's URL: the
// only place a soulctl login's code may go.
func loopbackRedirect(u string) bool {
	pu, err := url.Parse(u)
	if err != nil || pu.Scheme != "http" || pu.User != nil || pu.Port() == "" {
		return false
	}
	h := pu.Hostname()
	return h == "127.0.0.1" || h == "::1"
}

// localUIPath reports whether p is a path of the web UI on this keeper
// (never another host: no open redirect).
func localUIPath(p string) bool {
	u, err := url.Parse(p)
	return err == nil && u.Scheme == "" && u.Host == "" && strings.HasPrefix(u.Path, "/ui/") && !strings.Contains(p, "\\") && !strings.HasPrefix(p, "//")
}

// oidcCallback finishes a sign-in: GET /v1/auth/oidc/callback?code&state.
func (s *Server) oidcCallback(w http.ResponseWriter, r *http.Request) {
	// The sign-in cookie is spent whatever happens: a callback is good once.
	http.SetCookie(w, &http.Cookie{Name: oidcCookie, Path: "/v1/auth/oidc/", HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteLaxMode, MaxAge: -1})
	p, err := s.signIn(r)
	var none *access.NoRoleError
	if errors.As(err, &none) {
		err = &oidcError{http.StatusForbidden, "auth.oidc_no_role", none.Reason}
	}
	if err != nil {
		var oe *oidcError
		if !errors.As(err, &oe) {
			s.log.Error("OIDC sign-in", "err", err)
			oe = &oidcError{http.StatusInternalServerError, "internal", "the sign-in failed; try again"}
		} else {
			s.log.Warn("OIDC sign-in refused", "code", oe.code, "reason", oe.message, "client", hostOf(r.RemoteAddr))
		}
		s.writeProblem(w, problem(oe.status, oe.code, oe.message))
		return
	}
	if p.cookie != nil {
		http.SetCookie(w, p.cookie)
	}
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Referrer-Policy", "no-referrer")
	http.Redirect(w, r, p.location, http.StatusSeeOther)
}

// signedIn is a finished sign-in: the web UI session's cookie (none for a
// soulctl login) and where the browser goes.
type signedIn struct {
	cookie   *http.Cookie
	location string
}

func (s *Server) signIn(r *http.Request) (*signedIn, error) {
	q := r.URL.Query()
	if e := q.Get("error"); e != "" {
		return nil, &oidcError{http.StatusUnauthorized, "auth.oidc_denied", "the identity provider refused the sign-in: " + bounded(e+" "+q.Get("error_description"), 200)}
	}
	c, err := r.Cookie(oidcCookie)
	if err != nil || c.Value == "" {
		return nil, &oidcError{http.StatusUnauthorized, "auth.oidc_state", "no sign-in in progress in this browser (its cookie is gone, or this callback was used already); sign in again"}
	}
	raw, err := s.oidc.cfg.Open(c.Value)
	var p pendingLogin
	if err != nil || json.Unmarshal(raw, &p) != nil || p.Purpose != oidcPurpose || p.State == "" {
		return nil, &oidcError{http.StatusUnauthorized, "auth.oidc_state", "the sign-in cookie is not one this keeper made; sign in again"}
	}
	if !s.now().Before(p.Expires) {
		return nil, &oidcError{http.StatusUnauthorized, "auth.oidc_state", "the sign-in took longer than " + oidcLoginTTL.String() + "; sign in again"}
	}
	if subtle.ConstantTimeCompare([]byte(q.Get("state")), []byte(p.State)) != 1 {
		return nil, &oidcError{http.StatusUnauthorized, "auth.oidc_state", "the callback's state is not this browser's sign-in"}
	}
	oc, verifier, err := s.oidc.discover(r.Context())
	if err != nil {
		return nil, &oidcError{http.StatusBadGateway, "auth.oidc_unavailable", "the identity provider cannot be reached; try again"}
	}
	ctx, cancel := context.WithTimeout(s.oidc.httpContext(r.Context()), 15*time.Second)
	defer cancel()
	tok, err := oc.Exchange(ctx, q.Get("code"), oauth2.VerifierOption(p.Verifier))
	if err != nil {
		return nil, &oidcError{http.StatusUnauthorized, "auth.oidc_code", "the identity provider did not accept the sign-in's code: " + bounded(err.Error(), 300)}
	}
	rawID, _ := tok.Extra("id_token").(string)
	person, groups, err := s.verifyIDToken(ctx, verifier, rawID, p.Nonce)
	if err != nil {
		return nil, err
	}
	g, err := s.access.SignIn(r.Context(), person, groups, p.Project)
	if err != nil {
		return nil, err
	}
	if p.CLIRedirect != "" {
		return s.cliCode(r.Context(), p, person, groups, g)
	}
	return s.startPersonSession(r, person, groups, g, p.ReturnTo)
}

// cliCode ends a soulctl login at the provider: a one-time code, bound to
// soulctl's PKCE challenge, goes to soulctl's loopback listener.
func (s *Server) cliCode(ctx context.Context, p pendingLogin, person store.Person, groups []string, g access.Grant) (*signedIn, error) {
	code, err := randomSecret()
	if err != nil {
		return nil, err
	}
	b, _ := json.Marshal(cliCode{Purpose: cliCodePurpose, Person: person, Groups: groups, Role: g.Role, Project: g.Project, Challenge: p.CLIChallenge})
	if err := s.tokenStore.OIDCCodePut(ctx, cliCodeHash(code), s.oidc.cfg.Seal(b), s.now().Add(cliCodeTTL)); err != nil {
		return nil, err
	}
	u, _ := url.Parse(p.CLIRedirect)
	q := u.Query()
	q.Set("code", code)
	q.Set("state", p.CLIState)
	u.RawQuery = q.Encode()
	return &signedIn{location: u.String()}, nil
}

func cliCodeHash(code string) string { return domainHash("soulstack.oidc-cli-code.v1\x00", code) }

// exchangeCLICode is POST /v1/auth/oidc/token: soulctl's one-time code and
// its PKCE verifier for the person's token.
func (s *Server) exchangeCLICode(ctx context.Context, in *struct{ Body client.OIDCCodeExchange }) (*struct{ Body client.TokenCreated }, error) {
	refused := problem(http.StatusUnauthorized, "auth.oidc_code", "the login code is unknown, used already or expired, or the verifier is not its own; run soulctl login again")
	sealed, err := s.tokenStore.OIDCCodeTake(ctx, cliCodeHash(in.Body.Code), s.now())
	if errors.Is(err, store.ErrNotFound) {
		return nil, refused
	}
	if err != nil {
		return nil, err
	}
	raw, err := s.oidc.cfg.Open(sealed)
	var c cliCode
	if err != nil || json.Unmarshal(raw, &c) != nil || c.Purpose != cliCodePurpose {
		return nil, refused
	}
	if subtle.ConstantTimeCompare([]byte(oauth2.S256ChallengeFromVerifier(in.Body.Verifier)), []byte(c.Challenge)) != 1 {
		return nil, refused
	}
	t, plain, err := s.access.Mint(ctx, c.Person, c.Groups, access.Grant{Role: c.Role, Project: c.Project}, s.oidc.cfg.TokenTTL)
	if err != nil {
		return nil, err
	}
	return &struct{ Body client.TokenCreated }{Body: tokenCreatedWire(t, plain)}, nil
}

// idClaims are the ID token claims the keeper reads.
type idClaims struct {
	Name              string `json:"name"`
	Email             string `json:"email"`
	PreferredUsername string `json:"preferred_username"`
}

// verifyIDToken checks an ID token (signature, issuer, audience, expiry,
// nonce) and returns the person and their groups.
func (s *Server) verifyIDToken(ctx context.Context, verifier *oidc.IDTokenVerifier, raw, nonce string) (store.Person, []string, error) {
	if raw == "" {
		return store.Person{}, nil, &oidcError{http.StatusUnauthorized, "auth.oidc_id_token", "the identity provider's answer has no ID token"}
	}
	id, err := verifier.Verify(ctx, raw)
	if err != nil {
		return store.Person{}, nil, &oidcError{http.StatusUnauthorized, "auth.oidc_id_token", "the ID token is not valid for this keeper: " + bounded(err.Error(), 300)}
	}
	if subtle.ConstantTimeCompare([]byte(id.Nonce), []byte(nonce)) != 1 {
		return store.Person{}, nil, &oidcError{http.StatusUnauthorized, "auth.oidc_id_token", "the ID token was not issued for this sign-in (nonce)"}
	}
	var c idClaims
	var all map[string]any
	if err := id.Claims(&c); err != nil || id.Claims(&all) != nil {
		return store.Person{}, nil, &oidcError{http.StatusUnauthorized, "auth.oidc_id_token", "the ID token's claims cannot be read"}
	}
	name := c.Name
	for _, alt := range []string{c.Email, c.PreferredUsername, id.Subject} {
		if name == "" {
			name = alt
		}
	}
	return store.Person{Issuer: id.Issuer, Subject: id.Subject, Name: bounded(name, 200)}, groupsOf(all[s.oidc.cfg.GroupsClaim]), nil
}

// groupsOf reads a groups claim: a list of strings, or one string.
func groupsOf(v any) []string {
	var out []string
	switch x := v.(type) {
	case string:
		out = []string{x}
	case []any:
		for _, g := range x {
			if s, ok := g.(string); ok {
				out = append(out, s)
			}
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// startPersonSession mints the person's token and a web UI session for
// it; the session's key goes to the page in the URL fragment.
func (s *Server) startPersonSession(r *http.Request, person store.Person, groups []string, g access.Grant, returnTo string) (*signedIn, error) {
	t, _, err := s.access.Mint(r.Context(), person, groups, g, s.oidc.cfg.TokenTTL) // the session stands for the token, which is never shown
	if err != nil {
		return nil, err
	}
	sid, key, err := s.startSession(r.Context(), t.ID, t.ExpiresAt)
	if err != nil {
		return nil, err
	}
	c := sessionCookie(sid, r.TLS != nil)
	return &signedIn{cookie: &c, location: returnTo + "#csrf=" + url.QueryEscape(key)}, nil
}

// bounded cuts s to n bytes.
func bounded(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// personWire is a person as the API shows one.
func personWire(p *store.Person) *client.Person {
	if p == nil {
		return nil
	}
	return &client.Person{Issuer: p.Issuer, Subject: p.Subject, Name: p.Name}
}
