package client

import "net/url"

// Path is where the object is read (or, for a token, revoked) in the
// Operator API: the Location of the 201 that made it.
func (p Provider) Path() string { return "/v1/providers/" + url.PathEscape(p.Name) }

// Path is where the profile is read.
func (p Profile) Path() string { return "/v1/profiles/" + url.PathEscape(p.Name) }

// Path is where the soul is read.
func (s Soul) Path() string { return "/v1/souls/" + url.PathEscape(s.SID) }

// Path is where the run is read.
func (r Run) Path() string { return "/v1/runs/" + url.PathEscape(r.ID) }

// Path is where the project is read.
func (p Project) Path() string { return "/v1/projects/" + url.PathEscape(p.Name) }

// Path is where the token is revoked (tokens are listed, never read one
// by one: the secret is shown once).
func (t TokenCreated) Path() string { return "/v1/tokens/" + url.PathEscape(t.ID) }

// Path is the soul that joined.
func (j JoinResponse) Path() string { return "/v1/souls/" + url.PathEscape(j.SID) }

// Path is the list of the soul's seeds, where the seed is (a seed is not
// read alone).
func (s Seed) Path() string { return "/v1/souls/" + url.PathEscape(s.SID) + "/seeds" }
