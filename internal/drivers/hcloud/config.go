package hcloud

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/soulstack/soulstack/driversdk"
)

// Defaults of the provider config.
const (
	// DefaultEndpoint is Hetzner Cloud's API.
	DefaultEndpoint = "https://api.hetzner.cloud/v1"
	// DefaultPollInterval is how often the driver polls actions and
	// servers while it waits.
	DefaultPollInterval = time.Second
	// DefaultRetryBase is the first back-off of the SDK's retryer on
	// rate_limit_exceeded and transient errors; it doubles with jitter.
	DefaultRetryBase = time.Second
	// DefaultMaxRetries is how many times the SDK retries one request.
	DefaultMaxRetries = 5
	// DefaultSSHUser is the login user of Hetzner's system images.
	DefaultSSHUser = "root"
)

// Config is the provider's driver-specific config. Every key is optional:
//
//	{"endpoint": "https://api.hetzner.cloud/v1", "poll_interval": "1s",
//	 "retry_base": "1s", "max_retries": 5}
type Config struct {
	// Endpoint is the API's base URL (a Hetzner-compatible API, or a
	// fake in tests).
	Endpoint string
	// PollInterval is how often actions and servers are polled.
	PollInterval time.Duration
	// RetryBase is the first back-off of the SDK's retryer.
	RetryBase time.Duration
	// MaxRetries bounds the SDK's retries of one request.
	MaxRetries int
}

// Profile is a profile spec:
//
//	{"server_type": "cx22", "image": "ubuntu-24.04", "location": "fsn1",
//	 "networks": ["my-net"], "firewalls": ["my-fw"], "ssh_keys": ["admin"],
//	 "labels": {"team": "web"}, "enable_ipv4": true, "enable_ipv6": true,
//	 "placement_group": "spread", "ssh_user": "root", "upgrade_disk": false}
type Profile struct {
	// ServerType is the Hetzner server type (cx22, cpx31, …). Required.
	ServerType string `json:"server_type"`
	// Image is the image name or id (ubuntu-24.04, a snapshot id).
	// Required.
	Image string `json:"image"`
	// Location is the location (fsn1, nbg1, hel1, ash, hil, sin); empty
	// means the provider's region, or Hetzner's choice when that is
	// empty too.
	Location string `json:"location,omitempty"`
	// Networks are private networks (names or ids) to attach.
	Networks []string `json:"networks,omitempty"`
	// Firewalls are firewalls (names or ids) to apply.
	Firewalls []string `json:"firewalls,omitempty"`
	// SSHKeys are project SSH keys (names or ids) for the root user, on
	// top of the keeper's key that the driver puts in cloud-init.
	SSHKeys []string `json:"ssh_keys,omitempty"`
	// Labels are extra labels for the servers; keys under soulstack. are
	// the driver's own.
	Labels map[string]string `json:"labels,omitempty"`
	// EnableIPv4 and EnableIPv6 give the server a public address of that
	// family (both default true).
	EnableIPv4 *bool `json:"enable_ipv4,omitempty"`
	EnableIPv6 *bool `json:"enable_ipv6,omitempty"`
	// PlacementGroup is a placement group (name or id).
	PlacementGroup string `json:"placement_group,omitempty"`
	// SSHUser is the login user the keeper connects as (default root).
	SSHUser string `json:"ssh_user,omitempty"`
	// UpgradeDisk, on resize, grows the disk with the new type; a server
	// whose disk grew cannot be resized down again.
	UpgradeDisk bool `json:"upgrade_disk,omitempty"`
}

func (p Profile) ipv4() bool { return p.EnableIPv4 == nil || *p.EnableIPv4 }
func (p Profile) ipv6() bool { return p.EnableIPv6 == nil || *p.EnableIPv6 }

// rawConfig is Config as JSON.
type rawConfig struct {
	Endpoint     string `json:"endpoint"`
	PollInterval string `json:"poll_interval"`
	RetryBase    string `json:"retry_base"`
	MaxRetries   *int   `json:"max_retries"`
}

// strictDecode decodes a JSON object into v, refusing unknown keys; the
// field of the error names the key (prefixed with prefix).
func strictDecode(raw json.RawMessage, v any, prefix string) error {
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = json.RawMessage(`{}`)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var ute *json.UnmarshalTypeError
		switch {
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			key := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
			return driversdk.InvalidProfile(prefix+key, "unknown key")
		case errors.As(err, &ute):
			return driversdk.InvalidProfile(prefix+ute.Field, fmt.Sprintf("must be a %s, not a JSON %s", ute.Type, ute.Value))
		default:
			return driversdk.InvalidProfile(strings.TrimSuffix(prefix, "."), "not a JSON object: "+err.Error())
		}
	}
	if dec.Decode(&struct{}{}) != io.EOF {
		return driversdk.InvalidProfile(strings.TrimSuffix(prefix, "."), "trailing data after the JSON object")
	}
	return nil
}

// ParseConfig decodes and checks the provider's config strictly.
func ParseConfig(raw json.RawMessage) (Config, error) {
	var rc rawConfig
	if err := strictDecode(raw, &rc, "config."); err != nil {
		return Config{}, err
	}
	c := Config{Endpoint: DefaultEndpoint, PollInterval: DefaultPollInterval, RetryBase: DefaultRetryBase, MaxRetries: DefaultMaxRetries}
	if rc.Endpoint != "" {
		u, err := url.Parse(rc.Endpoint)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil {
			return Config{}, driversdk.InvalidProfile("config.endpoint", "must be an http(s) URL without user info")
		}
		c.Endpoint = strings.TrimRight(rc.Endpoint, "/")
	}
	dur := func(field, s string, into *time.Duration) error {
		if s == "" {
			return nil
		}
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 || d > 5*time.Minute {
			return driversdk.InvalidProfile("config."+field, "must be a duration between 1ns and 5m, such as 1s")
		}
		*into = d
		return nil
	}
	if err := dur("poll_interval", rc.PollInterval, &c.PollInterval); err != nil {
		return Config{}, err
	}
	if err := dur("retry_base", rc.RetryBase, &c.RetryBase); err != nil {
		return Config{}, err
	}
	if rc.MaxRetries != nil {
		if *rc.MaxRetries < 0 || *rc.MaxRetries > 20 {
			return Config{}, driversdk.InvalidProfile("config.max_retries", "must be between 0 and 20")
		}
		c.MaxRetries = *rc.MaxRetries
	}
	return c, nil
}

var (
	// reName is what Hetzner takes as a name of a server type, image,
	// location and the resources a profile names.
	reName = regexp.MustCompile(`^[A-Za-z0-9][-A-Za-z0-9_.]{0,62}$`)
	// reLabelKey and reLabelValue are Hetzner's label syntax (Kubernetes'
	// without the colon-free subtleties: an optional DNS prefix and /).
	reLabelKey   = regexp.MustCompile(`^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`)
	reLabelValue = regexp.MustCompile(`^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$`)
	reSSHUser    = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`)
)

// ParseProfile decodes and checks a profile spec strictly.
func ParseProfile(raw json.RawMessage) (Profile, error) {
	var p Profile
	if err := strictDecode(raw, &p, ""); err != nil {
		return Profile{}, err
	}
	if p.ServerType == "" {
		return Profile{}, driversdk.InvalidProfile("server_type", "is required (a Hetzner server type such as cx22)")
	}
	if p.Image == "" {
		return Profile{}, driversdk.InvalidProfile("image", "is required (an image name such as ubuntu-24.04, or an id)")
	}
	for field, v := range map[string]string{"server_type": p.ServerType, "image": p.Image, "location": p.Location, "placement_group": p.PlacementGroup} {
		if v != "" && !reName.MatchString(v) {
			return Profile{}, driversdk.InvalidProfile(field, fmt.Sprintf("%q is not a Hetzner name or id", v))
		}
	}
	for field, list := range map[string][]string{"networks": p.Networks, "firewalls": p.Firewalls, "ssh_keys": p.SSHKeys} {
		for i, v := range list {
			if !reName.MatchString(v) {
				return Profile{}, driversdk.InvalidProfile(fmt.Sprintf("%s[%d]", field, i), fmt.Sprintf("%q is not a Hetzner name or id", v))
			}
		}
	}
	for k, v := range p.Labels {
		switch {
		case !reLabelKey.MatchString(k):
			return Profile{}, driversdk.InvalidProfile("labels."+k, "is not a valid Hetzner label key")
		case strings.HasPrefix(k, "soulstack."):
			return Profile{}, driversdk.InvalidProfile("labels."+k, "keys starting with soulstack. are the driver's own")
		case !reLabelValue.MatchString(v):
			return Profile{}, driversdk.InvalidProfile("labels."+k, fmt.Sprintf("%q is not a valid Hetzner label value", v))
		}
	}
	if !p.ipv4() && !p.ipv6() && len(p.Networks) == 0 {
		return Profile{}, driversdk.InvalidProfile("networks", "a server without public addresses needs a private network to be reached")
	}
	if p.SSHUser != "" && !reSSHUser.MatchString(p.SSHUser) {
		return Profile{}, driversdk.InvalidProfile("ssh_user", "is not a valid user name")
	}
	return p, nil
}

// token extracts the API token from the provider's credentials: either
// the token itself (a line of text) or a JSON object {"token": "…"}. The
// token never appears in an error.
func token(creds []byte) (string, error) {
	s := strings.TrimSpace(string(creds))
	if strings.HasPrefix(s, "{") {
		var c struct {
			Token string `json:"token"`
		}
		dec := json.NewDecoder(strings.NewReader(s))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil {
			return "", driversdk.Errorf(CodeAuthFailed, `the credentials are a JSON object but not {"token": "…"}`)
		}
		s = strings.TrimSpace(c.Token)
	}
	if s == "" {
		return "", driversdk.Errorf(CodeAuthFailed, "the provider has no credentials: set credentials_ref to a Hetzner Cloud API token")
	}
	for _, r := range s {
		if r < 0x21 || r > 0x7e {
			return "", driversdk.Errorf(CodeAuthFailed, "the credentials are not a Hetzner Cloud API token (it contains spaces or control characters)")
		}
	}
	return s, nil
}
