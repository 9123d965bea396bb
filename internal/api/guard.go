package api

import (
	"context"
	"net/http"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/auth"
)

// Guard authenticates the requests of a handler served beside the API
// (the keeper's /mcp) exactly as the API's own routes do: the bearer
// token, the failed-authentication budget of the client address, and a
// problem+json answer (401 auth.invalid_token / auth.missing_token, 429
// auth.rate_limited) that stops the request. next finds the principal with
// Caller. Permissions are next's to check.
func (s *Server) Guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, prob := s.permit(r.Context(), hostOf(r.RemoteAddr), r.Header.Get("Authorization"), auth.Authenticated)
		if prob != nil {
			s.writeGuardProblem(w, r, prob)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
	})
}

// Caller returns the principal Guard authenticated for the request whose
// context is ctx.
func Caller(ctx context.Context) (auth.Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(auth.Principal)
	return p, ok
}

func (s *Server) writeGuardProblem(w http.ResponseWriter, r *http.Request, p *client.Problem) {
	switch p.Status {
	case http.StatusUnauthorized:
		w.Header().Set("WWW-Authenticate", wwwAuthenticate(baseURL(r)))
	case http.StatusTooManyRequests:
		w.Header().Set("Retry-After", retryAfterSeconds(s.limiter.interval))
	}
	if p.Title == "" {
		p.Title = http.StatusText(p.Status)
	}
	s.writeProblem(w, p)
}
