package openstack

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"strings"

	"github.com/soulstack/soulstack/driversdk"
)

// Config is the provider's driver-specific config. Every key is optional:
//
//	{"endpoint": "https://keystone.example.com:5000/v3", "interface": "public"}
type Config struct {
	// Endpoint is the Keystone v3 URL; it overrides the credentials'
	// auth_url (for a cloud whose identity service is reached another
	// way, and for tests).
	Endpoint string `json:"endpoint"`
	// Interface is the catalog interface of the compute and network
	// endpoints: public (default), internal or admin.
	Interface string `json:"interface"`
	// Address is the keeper's choice of a soul's address (public or
	// private); the driver only checks it.
	Address string `json:"address"`
}

// Profile is a VM spec:
//
//	{"image": "<image id>", "flavor": "m1.small", "network": "<network id>",
//	 "security_groups": ["default"], "key_name": "ops", "volume_size_gb": 20,
//	 "zone": "nova", "floating_network": "<external network id>",
//	 "labels": {"team": "web"}, "ssh_user": "debian"}
type Profile struct {
	// Image is the Glance image ID the VM boots from. Required.
	Image string `json:"image"`
	// Flavor is the Nova flavor, by ID or name. Required.
	Flavor string `json:"flavor"`
	// Network is the Neutron network ID the VM's port is on. Required.
	Network string `json:"network"`
	// SecurityGroups are security group names or IDs; empty means the
	// project's default group.
	SecurityGroups []string `json:"security_groups"`
	// KeyName is a Nova key pair to inject besides the keeper's key.
	KeyName string `json:"key_name"`
	// VolumeSizeGB, when set, boots the VM from a new volume of that size
	// made from Image (deleted with the VM).
	VolumeSizeGB int `json:"volume_size_gb"`
	// Zone is the availability zone.
	Zone string `json:"zone"`
	// FloatingNetwork is the external network a floating IP is taken
	// from for the VM's public address; empty means none.
	FloatingNetwork string `json:"floating_network"`
	// Labels are extra server metadata (keys must not start with
	// soulstack:).
	Labels map[string]string `json:"labels"`
	// SSHUser is the image's login user; the keeper reads it.
	SSHUser string `json:"ssh_user"`
	// Address is the keeper's choice of the soul's address.
	Address string `json:"address"`
}

// ResizeSpec is what Resize accepts: {"flavor": "m1.medium"}.
type ResizeSpec struct {
	Flavor string `json:"flavor"`
}

// Credentials are what the provider's credentials_ref resolves to: a JSON
// object in the shape of a clouds.yaml cloud's auth section (or a whole
// cloud entry, {"auth": {...}}), with either a password or an
// application credential.
type Credentials struct {
	AuthURL           string `json:"auth_url"`
	Username          string `json:"username"`
	UserID            string `json:"user_id"`
	Password          string `json:"password"`
	UserDomainName    string `json:"user_domain_name"`
	UserDomainID      string `json:"user_domain_id"`
	ProjectName       string `json:"project_name"`
	ProjectID         string `json:"project_id"`
	ProjectDomainName string `json:"project_domain_name"`
	ProjectDomainID   string `json:"project_domain_id"`
	// DomainName and DomainID set both the user's and the project's
	// domain, as in clouds.yaml.
	DomainName string `json:"domain_name"`
	DomainID   string `json:"domain_id"`

	ApplicationCredentialID     string `json:"application_credential_id"`
	ApplicationCredentialName   string `json:"application_credential_name"`
	ApplicationCredentialSecret string `json:"application_credential_secret"`
}

// decodeStrict decodes an object into v, refusing unknown keys; the
// error names the key but never echoes a value.
func decodeStrict(raw []byte, v any) (field string, err error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var typeErr *json.UnmarshalTypeError
		switch {
		case errors.As(err, &typeErr):
			return typeErr.Field, fmt.Errorf("must be a JSON %s", typeErr.Type)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			return strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`), errors.New("unknown key")
		default:
			return "", errors.New("not a JSON object")
		}
	}
	if dec.More() {
		return "", errors.New("trailing data after the JSON object")
	}
	return "", nil
}

func parseConfig(raw json.RawMessage) (Config, error) {
	var c Config
	if field, err := decodeStrict(raw, &c); err != nil {
		return c, driversdk.InvalidProfile(prefixed("config", field), err.Error())
	}
	if c.Endpoint != "" {
		if u, err := url.Parse(c.Endpoint); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return c, driversdk.InvalidProfile("config.endpoint", "must be an http(s) URL of Keystone v3")
		}
	}
	switch c.Interface {
	case "":
		c.Interface = "public"
	case "public", "internal", "admin":
	default:
		return c, driversdk.InvalidProfile("config.interface", "must be public, internal or admin")
	}
	if err := checkAddress("config.address", c.Address); err != nil {
		return c, err
	}
	return c, nil
}

func checkAddress(field, v string) error {
	switch v {
	case "", driversdk.AddressPublic, driversdk.AddressPrivate:
		return nil
	}
	return driversdk.InvalidProfile(field, "must be public or private")
}

func prefixed(prefix, field string) string {
	if field == "" {
		return prefix
	}
	return prefix + "." + field
}

// maxVolumeGB bounds volume_size_gb to something a cloud could give.
const maxVolumeGB = 64 << 10

// labelKey is what Nova accepts as a metadata key (1-255 characters);
// the driver is stricter so that keys stay readable in every tool.
var labelKey = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}$`)

func parseProfile(raw json.RawMessage) (Profile, error) {
	var p Profile
	if field, err := decodeStrict(raw, &p); err != nil {
		return p, driversdk.InvalidProfile(field, err.Error())
	}
	for _, req := range []struct{ field, v string }{{"image", p.Image}, {"flavor", p.Flavor}, {"network", p.Network}} {
		if strings.TrimSpace(req.v) == "" {
			return p, driversdk.InvalidProfile(req.field, "is required")
		}
	}
	if p.VolumeSizeGB < 0 || p.VolumeSizeGB > maxVolumeGB {
		return p, driversdk.InvalidProfile("volume_size_gb", fmt.Sprintf("must be between 1 and %d", maxVolumeGB))
	}
	for i, sg := range p.SecurityGroups {
		if strings.TrimSpace(sg) == "" {
			return p, driversdk.InvalidProfile(fmt.Sprintf("security_groups[%d]", i), "is empty")
		}
	}
	keys := make([]string, 0, len(p.Labels))
	for k := range p.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		switch {
		case !labelKey.MatchString(k):
			return p, driversdk.InvalidProfile("labels."+k, "is not a valid metadata key (letters, digits, _.:/-, at most 128)")
		case strings.HasPrefix(k, metaPrefix):
			return p, driversdk.InvalidProfile("labels."+k, "keys starting with "+metaPrefix+" are the keeper's own")
		case len(p.Labels[k]) > 255:
			return p, driversdk.InvalidProfile("labels."+k, "is longer than 255 characters")
		}
	}
	if err := checkAddress("address", p.Address); err != nil {
		return p, err
	}
	return p, nil
}

func parseResizeSpec(raw json.RawMessage) (ResizeSpec, error) {
	var s ResizeSpec
	if field, err := decodeStrict(raw, &s); err != nil {
		return s, driversdk.InvalidProfile(field, err.Error())
	}
	if strings.TrimSpace(s.Flavor) == "" {
		return s, driversdk.InvalidProfile("flavor", "is required: resize changes the flavor")
	}
	return s, nil
}

// parseCredentials decodes the provider's credentials. Its errors never
// contain any part of them but the name of an unknown key.
func parseCredentials(raw []byte) (Credentials, error) {
	var c Credentials
	if len(bytes.TrimSpace(raw)) == 0 {
		return c, driversdk.Errorf(codeAuthFailed, "the provider has no credentials: set its credentials_ref to a JSON object in the clouds.yaml auth shape")
	}
	var wrapped struct {
		Auth json.RawMessage `json:"auth"`
	}
	if json.Unmarshal(raw, &wrapped) == nil && len(wrapped.Auth) > 0 {
		var whole map[string]json.RawMessage
		_ = json.Unmarshal(raw, &whole)
		for k := range whole {
			if k != "auth" && k != "region_name" && k != "interface" && k != "identity_api_version" && k != "auth_type" {
				return c, driversdk.Errorf(codeAuthFailed, "credentials: unknown key %q", k)
			}
		}
		raw = wrapped.Auth
	}
	if field, err := decodeStrict(raw, &c); err != nil {
		if field != "" {
			return c, driversdk.Errorf(codeAuthFailed, "credentials: %s: %s", field, err)
		}
		return c, driversdk.Errorf(codeAuthFailed, "credentials: %s (want the clouds.yaml auth shape)", err)
	}
	appCred := c.ApplicationCredentialSecret != ""
	switch {
	case appCred && c.ApplicationCredentialID == "" && (c.ApplicationCredentialName == "" || (c.Username == "" && c.UserID == "")):
		return c, driversdk.Errorf(codeAuthFailed, "credentials: application_credential_secret needs application_credential_id (or a name with the user)")
	case !appCred && c.Password == "":
		return c, driversdk.Errorf(codeAuthFailed, "credentials: neither password nor application_credential_secret is set")
	case !appCred && c.Username == "" && c.UserID == "":
		return c, driversdk.Errorf(codeAuthFailed, "credentials: username or user_id is required with a password")
	}
	return c, nil
}
