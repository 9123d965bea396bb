package aws

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/soulstack/soulstack/driversdk"
)

// config is the provider's config object.
type config struct {
	// Endpoint replaces EC2's regional endpoint: an AWS-compatible cloud,
	// a VPC endpoint, or a test's fake.
	Endpoint string `json:"endpoint"`
	// MaxAttempts bounds the SDK retryer's attempts per API call.
	MaxAttempts int `json:"max_attempts"`
	// MaxBackoff caps the retryer's jittered backoff between attempts.
	MaxBackoff string `json:"max_backoff"`
	// PollInterval is how often Create and Resize describe the instances
	// while they wait for a state.
	PollInterval string `json:"poll_interval"`
	// Address is the keeper's choice of a soul's address (public or
	// private); the driver accepts it and reports both.
	Address string `json:"address"`

	maxBackoff   time.Duration
	pollInterval time.Duration
}

// credentials is the shape of the secret the provider's credentials_ref
// names: static keys, a shared-config profile, or a role to assume with
// either of them.
type credentials struct {
	AccessKeyID     string `json:"access_key_id"`
	SecretAccessKey string `json:"secret_access_key"`
	SessionToken    string `json:"session_token"`
	Profile         string `json:"profile"`
	RoleARN         string `json:"role_arn"`
	ExternalID      string `json:"external_id"`
	RoleSessionName string `json:"role_session_name"`
}

// profile is a profile spec.
type profile struct {
	ImageID            string            `json:"image_id"`
	InstanceType       string            `json:"instance_type"`
	SubnetID           string            `json:"subnet_id"`
	SecurityGroupIDs   []string          `json:"security_group_ids"`
	KeyName            string            `json:"key_name"`
	VolumeSizeGB       int32             `json:"volume_size_gb"`
	VolumeType         string            `json:"volume_type"`
	RootDevice         string            `json:"root_device"`
	AvailabilityZone   string            `json:"availability_zone"`
	IAMInstanceProfile string            `json:"iam_instance_profile"`
	Tags               map[string]string `json:"tags"`
	SSHUser            string            `json:"ssh_user"`
	Address            string            `json:"address"`
}

// resizeSpec is a Resize request's spec.
type resizeSpec struct {
	InstanceType string `json:"instance_type"`
}

var (
	reImage        = regexp.MustCompile(`^ami-[0-9a-f]{8,17}$`)
	reInstanceType = regexp.MustCompile(`^[a-z][a-z0-9-]*\.[a-z0-9-]+$`)
	reSubnet       = regexp.MustCompile(`^subnet-[0-9a-f]{8,17}$`)
	reGroup        = regexp.MustCompile(`^sg-[0-9a-f]{8,17}$`)
	reRegion       = regexp.MustCompile(`^[a-z]{2}(-[a-z]+)+-[0-9]+$`)
)

// decodeStrict decodes a JSON object into v, refusing unknown keys; the
// error names the key (with prefix) in Field.
func decodeStrict(raw json.RawMessage, v any, prefix string) error {
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = json.RawMessage(`{}`)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		msg := err.Error()
		if k, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
			k = strings.Trim(k, `"`)
			return driversdk.InvalidProfile(prefix+k, "unknown key")
		}
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return driversdk.InvalidProfile(prefix+te.Field, "must be a "+te.Type.String())
		}
		return driversdk.InvalidProfile(strings.TrimSuffix(prefix, "."), "not a JSON object: "+msg)
	}
	return nil
}

func parseConfig(p driversdk.Provider) (config, error) {
	var c config
	if err := decodeStrict(p.Config, &c, "config."); err != nil {
		return c, err
	}
	if p.Region == "" {
		return c, driversdk.InvalidProfile("region", "the provider needs a region (us-east-1, eu-central-1…)")
	}
	if !reRegion.MatchString(p.Region) {
		return c, driversdk.InvalidProfile("region", fmt.Sprintf("%q is not an AWS region name", p.Region))
	}
	if c.Endpoint != "" {
		u, err := url.Parse(c.Endpoint)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return c, driversdk.InvalidProfile("config.endpoint", "must be an http(s) URL")
		}
	}
	if c.MaxAttempts < 0 || c.MaxAttempts > 50 {
		return c, driversdk.InvalidProfile("config.max_attempts", "must be between 1 and 50")
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 10
	}
	var err error
	if c.maxBackoff, err = duration(c.MaxBackoff, 20*time.Second, "config.max_backoff"); err != nil {
		return c, err
	}
	if c.pollInterval, err = duration(c.PollInterval, 2*time.Second, "config.poll_interval"); err != nil {
		return c, err
	}
	if err := checkAddress(c.Address, "config.address"); err != nil {
		return c, err
	}
	return c, nil
}

func checkAddress(a, field string) error {
	if a != "" && a != driversdk.AddressPublic && a != driversdk.AddressPrivate {
		return driversdk.InvalidProfile(field, "must be public or private")
	}
	return nil
}

func duration(s string, def time.Duration, field string) (time.Duration, error) {
	if s == "" {
		return def, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, driversdk.InvalidProfile(field, "must be a positive duration such as 2s")
	}
	return d, nil
}

// parseCredentials decodes the provider's secret. Its errors never quote
// the secret.
func parseCredentials(raw []byte) (credentials, error) {
	var c credentials
	if len(bytes.TrimSpace(raw)) == 0 {
		return c, driversdk.InvalidProfile("credentials_ref", "the provider has no credentials: set credentials_ref to a JSON object with access_key_id and secret_access_key (or profile, role_arn)")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		field := "credentials_ref"
		if k, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return c, driversdk.InvalidProfile(field, "unknown key "+k+" in the credentials")
		}
		return c, driversdk.InvalidProfile(field, "the credentials are not a JSON object of strings")
	}
	static := c.AccessKeyID != "" || c.SecretAccessKey != ""
	switch {
	case static && (c.AccessKeyID == "" || c.SecretAccessKey == ""):
		return c, driversdk.InvalidProfile("credentials_ref", "access_key_id and secret_access_key go together")
	case static && c.Profile != "":
		return c, driversdk.InvalidProfile("credentials_ref", "give access keys or a profile, not both")
	case !static && c.Profile == "":
		return c, driversdk.InvalidProfile("credentials_ref", "the credentials need access_key_id and secret_access_key, or profile")
	case c.SessionToken != "" && !static:
		return c, driversdk.InvalidProfile("credentials_ref", "session_token goes with access keys")
	case (c.ExternalID != "" || c.RoleSessionName != "") && c.RoleARN == "":
		return c, driversdk.InvalidProfile("credentials_ref", "external_id and role_session_name go with role_arn")
	}
	return c, nil
}

func parseProfile(raw json.RawMessage) (profile, error) {
	var p profile
	if err := decodeStrict(raw, &p, ""); err != nil {
		return p, err
	}
	switch {
	case p.ImageID == "":
		return p, driversdk.InvalidProfile("image_id", "required: the AMI to boot (ami-…)")
	case !reImage.MatchString(p.ImageID):
		return p, driversdk.InvalidProfile("image_id", fmt.Sprintf("%q is not an AMI id (ami-…)", p.ImageID))
	case p.InstanceType == "":
		return p, driversdk.InvalidProfile("instance_type", "required (t3.micro, m7i.large…)")
	case !reInstanceType.MatchString(p.InstanceType):
		return p, driversdk.InvalidProfile("instance_type", fmt.Sprintf("%q is not an instance type", p.InstanceType))
	case p.SubnetID != "" && !reSubnet.MatchString(p.SubnetID):
		return p, driversdk.InvalidProfile("subnet_id", fmt.Sprintf("%q is not a subnet id (subnet-…)", p.SubnetID))
	case p.VolumeSizeGB < 0 || p.VolumeSizeGB > 16384:
		return p, driversdk.InvalidProfile("volume_size_gb", "must be between 1 and 16384")
	case p.VolumeType != "" && p.VolumeSizeGB == 0:
		return p, driversdk.InvalidProfile("volume_type", "goes with volume_size_gb")
	case p.RootDevice != "" && !strings.HasPrefix(p.RootDevice, "/dev/"):
		return p, driversdk.InvalidProfile("root_device", "must be a device name such as /dev/xvda")
	}
	for i, g := range p.SecurityGroupIDs {
		if !reGroup.MatchString(g) {
			return p, driversdk.InvalidProfile(fmt.Sprintf("security_group_ids[%d]", i), fmt.Sprintf("%q is not a security group id (sg-…)", g))
		}
	}
	for k := range p.Tags {
		if strings.HasPrefix(strings.ToLower(k), "soulstack") || strings.HasPrefix(strings.ToLower(k), "aws:") || k == "Name" {
			return p, driversdk.InvalidProfile("tags."+k, "this tag key is the driver's own")
		}
	}
	if err := checkAddress(p.Address, "address"); err != nil {
		return p, err
	}
	if p.RootDevice == "" {
		p.RootDevice = "/dev/xvda"
	}
	return p, nil
}

func parseResize(raw json.RawMessage) (resizeSpec, error) {
	var s resizeSpec
	if err := decodeStrict(raw, &s, ""); err != nil {
		return s, err
	}
	if !reInstanceType.MatchString(s.InstanceType) {
		return s, driversdk.InvalidProfile("instance_type", "resize needs an instance_type (t3.small…); it is all EC2 can change in place")
	}
	return s, nil
}
