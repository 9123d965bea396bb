package openstack

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/soulstack/soulstack/driversdk"
)

// Retry policy: bounded, exponential with full jitter, honouring the
// cloud's Retry-After within maxBackoff.
const (
	maxRetries  = 6
	baseBackoff = 100 * time.Millisecond
	maxBackoff  = 5 * time.Second
)

// clients are the authenticated service clients one call uses.
type clients struct {
	compute *gophercloud.ServiceClient
	network *gophercloud.ServiceClient
	cfg     Config
}

// connect authenticates to Keystone v3 with the provider's credentials
// and finds Nova and Neutron in the catalog for the provider's region.
func connect(ctx context.Context, p driversdk.Provider) (*clients, error) {
	cfg, err := parseConfig(p.Config)
	if err != nil {
		return nil, err
	}
	creds, err := parseCredentials(p.Credentials)
	if err != nil {
		return nil, err
	}
	authURL := creds.AuthURL
	if cfg.Endpoint != "" {
		authURL = cfg.Endpoint
	}
	if authURL == "" {
		return nil, driversdk.InvalidProfile("config.endpoint", "no Keystone URL: set auth_url in the credentials or endpoint in the provider's config")
	}
	pc, err := openstack.NewClient(authURL)
	if err != nil {
		return nil, driversdk.InvalidProfile("config.endpoint", "not a usable Keystone URL")
	}
	pc.HTTPClient = http.Client{Timeout: 60 * time.Second}
	pc.UserAgent.Prepend("soulstack-cloud-openstack")
	pc.RetryFunc = retry
	pc.MaxBackoffRetries = maxRetries
	if err := openstack.Authenticate(ctx, pc, authOptions(authURL, creds)); err != nil {
		err = cloudError("authenticate to Keystone", err)
		if driversdk.CodeOf(err) == driversdk.CodeDriverFailed {
			// gophercloud refused the credentials' shape before sending.
			err = driversdk.Errorf(codeAuthFailed, "%s", err.(*driversdk.Error).Message)
		}
		return nil, err
	}
	eo := gophercloud.EndpointOpts{Region: p.Region, Availability: gophercloud.Availability(cfg.Interface)}
	compute, err := openstack.NewComputeV2(pc, eo)
	if err != nil {
		return nil, driversdk.Errorf(driversdk.CodeDriverUnavailable, "no compute (Nova) endpoint in the catalog for region %q", p.Region)
	}
	network, err := openstack.NewNetworkV2(pc, eo)
	if err != nil {
		return nil, driversdk.Errorf(driversdk.CodeDriverUnavailable, "no network (Neutron) endpoint in the catalog for region %q", p.Region)
	}
	return &clients{compute: compute, network: network, cfg: cfg}, nil
}

func authOptions(authURL string, c Credentials) gophercloud.AuthOptions {
	userDomainName, userDomainID := first(c.UserDomainName, c.DomainName), first(c.UserDomainID, c.DomainID)
	projDomainName, projDomainID := first(c.ProjectDomainName, c.DomainName), first(c.ProjectDomainID, c.DomainID)
	if projDomainName == "" && projDomainID == "" {
		// As keystoneauth does for a project name without a domain:
		// the user's domain.
		projDomainName, projDomainID = userDomainName, userDomainID
	}
	o := gophercloud.AuthOptions{
		IdentityEndpoint: authURL,
		Username:         c.Username,
		UserID:           c.UserID,
		Password:         c.Password,
		DomainName:       userDomainName,
		DomainID:         userDomainID,
		AllowReauth:      true,
	}
	if c.ApplicationCredentialSecret != "" {
		o.Password = ""
		o.ApplicationCredentialID = c.ApplicationCredentialID
		o.ApplicationCredentialName = c.ApplicationCredentialName
		o.ApplicationCredentialSecret = c.ApplicationCredentialSecret
		if c.ApplicationCredentialID != "" {
			o.Username, o.UserID, o.DomainName, o.DomainID = "", "", "", ""
		}
		return o // an application credential is scoped already
	}
	if c.ProjectID != "" || c.ProjectName != "" {
		o.Scope = &gophercloud.AuthScope{ProjectID: c.ProjectID, ProjectName: c.ProjectName}
		if c.ProjectID == "" {
			o.Scope.DomainName, o.Scope.DomainID = projDomainName, projDomainID
		}
	}
	return o
}

func first(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// retry is the ProviderClient's RetryFunc: gophercloud calls it for every
// failed request, with the number of failures so far. Rate limits (429,
// and Nova's 413 overLimit with Retry-After) are retried for every
// method, since the cloud did nothing; transient 5xx and transport errors
// only for GET and DELETE, because a POST the cloud may have carried out
// must not be repeated blindly (Create finds what it made by its tags
// instead). It returns err to stop.
func retry(ctx context.Context, method, _ string, _ *gophercloud.RequestOpts, err error, failures uint) error {
	if failures > maxRetries {
		return err
	}
	var wait time.Duration
	var resp gophercloud.ErrUnexpectedResponseCode
	switch {
	case errors.As(err, &resp) && isQuota(resp.Actual, bodyMessage(resp.Body)):
		return err // old Novas answer a quota 413 with Retry-After too
	case errors.As(err, &resp) && (resp.Actual == http.StatusTooManyRequests ||
		(resp.Actual == http.StatusRequestEntityTooLarge && resp.ResponseHeader.Get("Retry-After") != "")):
		wait = retryAfter(resp.ResponseHeader.Get("Retry-After"))
	case method != http.MethodGet && method != http.MethodDelete:
		return err
	case errors.As(err, &resp) && (resp.Actual == http.StatusBadGateway || resp.Actual == http.StatusServiceUnavailable ||
		resp.Actual == http.StatusGatewayTimeout || resp.Actual == http.StatusInternalServerError):
	case errors.As(err, &resp):
		return err // a definite answer
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return err
	}
	backoff := min(maxBackoff, baseBackoff<<min(failures-1, 10))
	backoff = backoff/2 + rand.N(backoff/2+1) // jitter
	wait = max(wait, backoff)
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// retryAfter reads a Retry-After header in seconds, capped.
func retryAfter(h string) time.Duration {
	n, err := strconv.Atoi(h)
	if err != nil || n < 0 {
		return 0
	}
	return min(maxBackoff, time.Duration(n)*time.Second)
}
