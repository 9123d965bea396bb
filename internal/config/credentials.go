package config

import (
	"fmt"
	"net/url"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Credentials says which local credentials references (file:, env:) the
// keeper resolves for providers and souls. Keeper admins alone may write
// such a reference; a project's own secrets live in its credentials
// registry (credential:NAME) or under its Vault prefix. Whatever these
// lists allow, the keeper's own secrets (its data dir, its keys, the
// references in this file) are never resolvable for a provider or soul.
type Credentials struct {
	// Files are the directories whose files file: references may name
	// (after symlinks are resolved). Empty: no file: reference resolves.
	Files []string `yaml:"files"`
	// Env are the environment variables env: references may name; a
	// trailing * matches a prefix (HCLOUD_*). Empty: none resolves.
	Env []string `yaml:"env"`
}

var envPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*\*?$|^\*$`)

func (c Credentials) validate() error {
	for i, d := range c.Files {
		if !filepath.IsAbs(d) || filepath.Clean(d) != d {
			return fmt.Errorf("credentials.files[%d]: %q is not an absolute, clean directory", i, d)
		}
	}
	for i, e := range c.Env {
		if !envPattern.MatchString(e) {
			return fmt.Errorf("credentials.env[%d]: %q is not a variable name, optionally ending in *", i, e)
		}
	}
	return nil
}

// Driver is what a keeper admin allows one driver's providers.
type Driver struct {
	// Endpoints are the URL prefixes a provider's config may name as its
	// endpoint (the cloud API the driver calls instead of the cloud's own,
	// and sends the provider's credentials to). Empty: a provider of this
	// driver may not set an endpoint.
	Endpoints []string `yaml:"endpoints"`
}

func validateDrivers(ds map[string]Driver) error {
	names := make([]string, 0, len(ds))
	for n := range ds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		for i, e := range ds[n].Endpoints {
			u, err := url.Parse(e)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return fmt.Errorf("drivers.%s.endpoints[%d]: %q is not an http:// or https:// URL prefix", n, i, e)
			}
		}
	}
	return nil
}

// EndpointAllowed reports whether keeper.yml lets providers of driver
// name endpoint: it starts with one of the driver's allowed prefixes, and
// the prefix ends at a boundary (the whole prefix, then nothing or one of
// / : ? #), so that http://127.0.0.1:99 does not allow http://127.0.0.1:999.
func (c Config) EndpointAllowed(driver, endpoint string) bool {
	for _, p := range c.Drivers[driver].Endpoints {
		if !strings.HasPrefix(endpoint, p) {
			continue
		}
		rest := endpoint[len(p):]
		if rest == "" || strings.HasSuffix(p, "/") || strings.ContainsRune("/:?#", rune(rest[0])) {
			return true
		}
	}
	return false
}

// ProjectVaultPrefix is the Vault path prefix a project's vault:
// references must lie under (vault.project_prefix with {project}
// replaced); empty when none is configured.
func (v Vault) ProjectVaultPrefix(project string) string {
	if v.ProjectPrefix == "" {
		return ""
	}
	return strings.ReplaceAll(v.ProjectPrefix, "{project}", project)
}

// KeeperRefs are the credentials references keeper.yml itself holds: the
// keeper's own secrets, never resolvable for a provider or soul.
func (c Config) KeeperRefs() []string {
	refs := []string{c.DataKeyRef, c.AuditKeyRef, c.Vault.TokenRef, c.NATS.PasswordRef, c.NATS.IssuerSeedRef, c.OIDC.ClientSecretRef}
	for _, n := range c.Notifications {
		refs = append(refs, n.SecretRef)
	}
	out := refs[:0]
	for _, r := range refs {
		if r != "" {
			out = append(out, r)
		}
	}
	return out
}
