package api

import (
	"encoding/json"
	"regexp"
	"strings"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/secret"
)

// dnsLabel is a registry name: lower-case letters, digits and '-', not at
// either end, 1 to 63 characters.
var dnsLabel = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// checkName validates a registry name (provider, profile, driver, token).
func checkName(location, name string) *client.Problem {
	switch {
	case name == "":
		return invalid("name.invalid", location, "must not be empty")
	case len(name) > 63:
		return invalid("name.invalid", location, "is %d characters long; at most 63 are allowed", len(name))
	case !dnsLabel.MatchString(name):
		return invalid("name.invalid", location, "%q is not a DNS label: use lower-case letters, digits and '-' (not at either end)", name)
	}
	return nil
}

// checkSID validates a soul id: a DNS name of labels joined by dots, at
// most 253 characters.
func checkSID(location, sid string) *client.Problem {
	if sid == "" {
		return invalid("sid.invalid", location, "must not be empty")
	}
	if len(sid) > 253 {
		return invalid("sid.invalid", location, "is %d characters long; at most 253 are allowed", len(sid))
	}
	for _, label := range strings.Split(sid, ".") {
		if len(label) > 63 || !dnsLabel.MatchString(label) {
			return invalid("sid.invalid", location, "%q is not a DNS name: each dot-separated label must be a DNS label of at most 63 characters", sid)
		}
	}
	return nil
}

// checkRef validates an optional credentials reference.
func checkRef(code, location, ref string) *client.Problem {
	if ref == "" {
		return nil
	}
	if _, err := secret.ParseRef(ref); err != nil {
		return invalid(code, location, "%s", err.Error())
	}
	return nil
}

// checkHost validates a soul's address: an IP or a host name.
func checkHost(location, host string) *client.Problem {
	if host == "" {
		return invalid("address.invalid", location, "must not be empty")
	}
	if len(host) > 253 || strings.ContainsAny(host, " \t\r\n/@") {
		return invalid("address.invalid", location, "%q is not an IP address or host name", host)
	}
	return nil
}

// first returns the first non-nil problem.
func first(ps ...*client.Problem) error {
	for _, p := range ps {
		if p != nil {
			return p
		}
	}
	return nil
}

// objectJSON encodes a request's free-form object, or {} when it is absent.
func objectJSON(m map[string]any) json.RawMessage {
	b, err := json.Marshal(m)
	if err != nil || m == nil {
		return json.RawMessage(`{}`)
	}
	return b
}
