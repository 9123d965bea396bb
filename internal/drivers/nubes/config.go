package nubes

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/soulstack/soulstack/driversdk"
)

// Defaults of the provider config.
const (
	// DefaultEndpoint is the deck-api's base URL as Nubes' own Terraform
	// provider has it (a later public project records a move to
	// https://lk-api-gateway.ngcloud.ru/api/v1/svc: set endpoint).
	DefaultEndpoint = "https://deck-api.ngcloud.ru/api/v1/index.cfm"
	// DefaultAddressKey is the key of a running VM's state.params the
	// driver reads its address from. Which key the real API uses is not
	// public (docs/drivers/nubes.md): this default is the fake's, and a
	// real account sets address_key.
	DefaultAddressKey = "vmIpAddress"
	// DefaultPollInterval is how often operations and instances are
	// polled while the driver waits.
	DefaultPollInterval = 5 * time.Second
	// DefaultRetryBase is the first retry's delay on 5xx, 429 and 422
	// Concurrent operations; it doubles with jitter.
	DefaultRetryBase = 2 * time.Second
)

// The destroy modes.
const (
	DestroyDelete  = "delete"
	DestroySuspend = "suspend"
)

// Config is the provider's driver-specific config:
//
//	{"endpoint": "https://deck-api.ngcloud.ru/api/v1/index.cfm",
//	 "vapp_uid": "…", "address_key": "vmIpAddress", "destroy": "delete",
//	 "poll_interval": "5s", "retry_base": "2s"}
type Config struct {
	Endpoint string
	// VAppUID is the vApp new VMs go into unless the profile names one.
	VAppUID string
	// AddressKey is the state.params key holding a VM's address.
	AddressKey string
	// Destroy is delete (the default) or suspend (quarantine, as the
	// Terraform provider's default does).
	Destroy      string
	PollInterval time.Duration
	RetryBase    time.Duration
}

// Profile is a profile spec:
//
//	{"cpus": 2, "memory_gb": 4, "disk_gb": 20, "image": "Debian_13-20G",
//	 "ip_space": "inet", "allowed_ips": ["203.0.113.0/24"],
//	 "allowed_ports": [22, 443], "user": "debian", "vapp_uid": "…"}
type Profile struct {
	CPUs     int `json:"cpus"`
	MemoryGB int `json:"memory_gb"`
	// DiskGB is an extra disk (0: none).
	DiskGB int    `json:"disk_gb,omitempty"`
	Image  string `json:"image"`
	// IPSpace names the external IP space; empty: no external address.
	IPSpace      string   `json:"ip_space,omitempty"`
	AllowedIPs   []string `json:"allowed_ips,omitempty"`
	AllowedPorts []int    `json:"allowed_ports,omitempty"`
	// User is the login the keeper's public key is given to.
	User    string `json:"user,omitempty"`
	VAppUID string `json:"vapp_uid,omitempty"`
}

// ParseConfig decodes and checks a provider config.
func ParseConfig(raw json.RawMessage) (Config, error) {
	var in struct {
		Endpoint     string `json:"endpoint"`
		VAppUID      string `json:"vapp_uid"`
		AddressKey   string `json:"address_key"`
		Destroy      string `json:"destroy"`
		PollInterval string `json:"poll_interval"`
		RetryBase    string `json:"retry_base"`
	}
	if err := strict(raw, &in); err != nil {
		return Config{}, decodeError("config", err)
	}
	c := Config{Endpoint: in.Endpoint, VAppUID: in.VAppUID, AddressKey: in.AddressKey, Destroy: in.Destroy,
		PollInterval: DefaultPollInterval, RetryBase: DefaultRetryBase}
	if c.Endpoint == "" {
		c.Endpoint = DefaultEndpoint
	}
	if u, err := url.Parse(c.Endpoint); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return Config{}, invalid("config.endpoint", "%q is not an http(s) URL", c.Endpoint)
	}
	if c.AddressKey == "" {
		c.AddressKey = DefaultAddressKey
	}
	switch c.Destroy {
	case "":
		c.Destroy = DestroyDelete
	case DestroyDelete, DestroySuspend:
	default:
		return Config{}, invalid("config.destroy", "%q is not delete or suspend", c.Destroy)
	}
	for field, d := range map[string]struct {
		text string
		into *time.Duration
	}{"config.poll_interval": {in.PollInterval, &c.PollInterval}, "config.retry_base": {in.RetryBase, &c.RetryBase}} {
		if d.text == "" {
			continue
		}
		v, err := time.ParseDuration(d.text)
		if err != nil || v <= 0 {
			return Config{}, invalid(field, "%q is not a positive duration (5s, 500ms)", d.text)
		}
		*d.into = v
	}
	return c, nil
}

// ParseProfile decodes and checks a profile spec for a provider's config.
func ParseProfile(raw json.RawMessage, c Config) (Profile, error) {
	var p Profile
	if err := strict(raw, &p); err != nil {
		return Profile{}, decodeError("profile", err)
	}
	switch {
	case p.CPUs < 1 || p.CPUs > 64:
		return Profile{}, invalid("profile.cpus", "%d is not 1 to 64", p.CPUs)
	case p.MemoryGB < 1 || p.MemoryGB > 512:
		return Profile{}, invalid("profile.memory_gb", "%d is not 1 to 512 (GB)", p.MemoryGB)
	case p.DiskGB < 0:
		return Profile{}, invalid("profile.disk_gb", "%d is negative", p.DiskGB)
	case p.Image == "":
		return Profile{}, invalid("profile.image", "is required (Debian_13-20G, Ubuntu_22-20G, RockyLinux_9-16G-cloudinit)")
	case p.VAppUID == "" && c.VAppUID == "":
		return Profile{}, invalid("profile.vapp_uid", "is required: the vApp the VMs go into (or the provider config's vapp_uid)")
	}
	for i, port := range p.AllowedPorts {
		if port < 1 || port > 65535 {
			return Profile{}, invalid(fmt.Sprintf("profile.allowed_ports[%d]", i), "%d is not a port", port)
		}
	}
	if p.VAppUID == "" {
		p.VAppUID = c.VAppUID
	}
	return p, nil
}

// strict decodes raw into v, refusing unknown keys and trailing data; an
// empty raw is {}.
func strict(raw json.RawMessage, v any) error {
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = json.RawMessage("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("trailing data after the object")
	}
	return nil
}

// decodeError names the key at fault in what of a decode error: an
// unknown key by its name (the message says nothing of its value), a
// wrong type by its field.
func decodeError(what string, err error) error {
	if k, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return invalid(what+"."+strings.Trim(k, `"`), "is not a key of the nubes driver's %s", what)
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return invalid(what+"."+te.Field, "is not a %s", te.Type)
	}
	return invalid(what, "%v", err)
}

func invalid(field, format string, args ...any) error {
	return &driversdk.Error{Code: driversdk.CodeProfileInvalid, Field: field, Message: fmt.Sprintf(format, args...)}
}

// CodeAuthFailed: the deck-api refused the token (401), or there is none.
const CodeAuthFailed = "nubes.auth_failed"

// token is the bearer token of the provider's credentials: the token
// alone, or {"token": "…"}.
func token(creds []byte) (string, error) {
	s := strings.TrimSpace(string(creds))
	if strings.HasPrefix(s, "{") {
		var c struct {
			Token string `json:"token"`
		}
		if err := strict(json.RawMessage(s), &c); err != nil {
			return "", driversdk.Errorf(CodeAuthFailed, `the credentials are a JSON object but not {"token": "…"}`)
		}
		s = strings.TrimSpace(c.Token)
	}
	if s == "" {
		return "", driversdk.Errorf(CodeAuthFailed, "the provider has no credentials: set credentials_ref to a deck-api token (copied from the Nubes portal)")
	}
	for _, r := range s {
		if r < 0x21 || r > 0x7e {
			return "", driversdk.Errorf(CodeAuthFailed, "the credentials are not a deck-api token (it contains spaces or control characters)")
		}
	}
	return s, nil
}
