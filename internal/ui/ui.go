// Package ui is the keeper's web UI: plain HTML, CSS and JavaScript
// modules embedded in the binary and served at /ui/, with no build step.
// The pages sign in through POST /v1/session (the token then lives in an
// HttpOnly cookie page scripts cannot read) and call the REST API and its
// event streams like any client; the API enforces RBAC, masking and the
// cookie session's CSRF checks (internal/api/session.go).
package ui

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed assets
var assets embed.FS

// Prefix is where the keeper serves the UI.
const Prefix = "/ui/"

// ContentSecurityPolicy allows the UI's own files and same-origin API calls
// only: no inline script, no other origin, no framing.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; font-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// Assets returns the embedded files, rooted at the UI's directory.
func Assets() fs.FS {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the directory is embedded above
	}
	return sub
}

// Handler serves the UI under Prefix.
func Handler() http.Handler {
	files := http.StripPrefix(Prefix, http.FileServerFS(Assets()))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}
