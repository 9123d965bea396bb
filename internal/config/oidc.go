package config

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"
)

// OIDC is keeper.yml's oidc section: people sign in to the web UI with the
// company's OpenID Connect provider (authorization code with PKCE), and the
// groups in their ID token give them a role. Off without issuer.
type OIDC struct {
	// Issuer is the provider's issuer URL (its discovery document is at
	// <issuer>/.well-known/openid-configuration).
	Issuer string `yaml:"issuer"`
	// ClientID is the keeper's client at the provider; ID tokens must be
	// issued to it (their audience).
	ClientID string `yaml:"client_id"`
	// ClientSecretRef is the client's secret (env:, file: or vault:); empty
	// for a public client.
	ClientSecretRef string `yaml:"client_secret_ref"`
	// RedirectURL is the keeper's callback as registered at the provider:
	// <the keeper's URL as browsers reach it>/v1/auth/oidc/callback.
	RedirectURL string `yaml:"redirect_url"`
	// Scopes asked for; default openid, profile, email, groups.
	Scopes []string `yaml:"scopes"`
	// GroupsClaim is the ID token claim that lists the person's groups;
	// default groups.
	GroupsClaim string `yaml:"groups_claim"`
	// Roles maps a group to the keeper-wide role its members get (admin,
	// operator or viewer); a person in several groups gets the strongest.
	Roles map[string]string `yaml:"roles"`
	// Projects maps a project to its groups' roles there: a person in
	// none of Roles' groups signs in to a project where a group of theirs
	// (or a binding made through the API) has a role. A person with no
	// role anywhere is refused.
	Projects map[string]map[string]string `yaml:"projects"`
	// TokenTTL is how long a sign-in lasts: the lifetime of the token the
	// keeper mints for the person (default 12h). The person's access is
	// checked again at the next sign-in.
	TokenTTL Duration `yaml:"token_ttl"`
}

// dnsLabel is a project's name: lower-case letters, digits and '-'.
var dnsLabel = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// Enabled reports whether OIDC sign-in is configured.
func (o OIDC) Enabled() bool { return o.Issuer != "" }

// OIDCRoles are the roles a group may map to, weakest first.
var OIDCRoles = []string{"viewer", "operator", "admin"}

func (o OIDC) withDefaults() OIDC {
	if !o.Enabled() {
		return o
	}
	if len(o.Scopes) == 0 {
		o.Scopes = []string{"openid", "profile", "email", "groups"}
	}
	if o.GroupsClaim == "" {
		o.GroupsClaim = "groups"
	}
	orDefault(&o.TokenTTL, 12*time.Hour)
	return o
}

func (o OIDC) validate() error {
	if !o.Enabled() {
		if o.ClientID != "" || len(o.Roles) > 0 || o.RedirectURL != "" {
			return fmt.Errorf("oidc.issuer: must be set with the rest of the oidc section")
		}
		return nil
	}
	u, err := url.Parse(o.Issuer)
	if err != nil || u.Host == "" || u.RawQuery != "" || !(u.Scheme == "https" || u.Scheme == "http" && IsLoopback(u.Host)) {
		return fmt.Errorf("oidc.issuer: %q is not an https:// URL (http:// only on loopback)", o.Issuer)
	}
	if strings.TrimSpace(o.ClientID) == "" {
		return fmt.Errorf("oidc.client_id: must be set (the keeper's client at %s)", o.Issuer)
	}
	if r := o.ClientSecretRef; r != "" && !strings.HasPrefix(r, "env:") && !strings.HasPrefix(r, "file:") && !strings.HasPrefix(r, "vault:") {
		return fmt.Errorf("oidc.client_secret_ref: want env:NAME, file:/path or vault:<path>#<field>")
	}
	ru, err := url.Parse(o.RedirectURL)
	if err != nil || ru.Host == "" || (ru.Scheme != "https" && ru.Scheme != "http") || ru.Path != "/v1/auth/oidc/callback" || ru.RawQuery != "" {
		return fmt.Errorf("oidc.redirect_url: %q is not <the keeper's URL>/v1/auth/oidc/callback", o.RedirectURL)
	}
	if !slices.Contains(o.Scopes, "openid") {
		return fmt.Errorf("oidc.scopes: %v lacks openid", o.Scopes)
	}
	if len(o.Roles) == 0 && len(o.Projects) == 0 {
		return fmt.Errorf("oidc.roles: map at least one group to a role (%s), here or in oidc.projects; nobody could sign in", strings.Join(OIDCRoles, ", "))
	}
	for g, r := range o.Roles {
		if !slices.Contains(OIDCRoles, r) {
			return fmt.Errorf("oidc.roles.%s: %q is not one of %s", g, r, strings.Join(OIDCRoles, ", "))
		}
	}
	for p, groups := range o.Projects {
		if !dnsLabel.MatchString(p) {
			return fmt.Errorf("oidc.projects.%s: not a project name (a DNS label)", p)
		}
		for g, r := range groups {
			if !slices.Contains(OIDCRoles, r) {
				return fmt.Errorf("oidc.projects.%s.%s: %q is not one of %s", p, g, r, strings.Join(OIDCRoles, ", "))
			}
		}
	}
	return positive("oidc.token_ttl", o.TokenTTL, Duration(time.Minute), "12h")
}
