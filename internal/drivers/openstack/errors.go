package openstack

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/soulstack/soulstack/driversdk"
)

// Codes of this driver's errors beyond driversdk's own.
const (
	codeAuthFailed = "auth.failed"
	codeQuota      = "quota.exceeded"
	codeVMFailed   = "vm.failed"
)

// cloudError translates an error from gophercloud (or the context) into
// a *driversdk.Error. It is the one place where the cloud's answers
// become codes. what says what the driver was doing ("create server
// web-1"). The message carries the cloud's own explanation (the
// "message" of its error body) but never the request, so no credential
// can reach it.
func cloudError(what string, err error) error {
	if err == nil {
		return nil
	}
	var de *driversdk.Error
	if errors.As(err, &de) {
		return err
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return driversdk.Errorf(driversdk.CodeDriverTimeout, "%s: the call's deadline passed", what)
	}
	var reauth *gophercloud.ErrUnableToReauthenticate
	if errors.As(err, &reauth) {
		return driversdk.Errorf(codeAuthFailed, "%s: the token expired and the credentials were refused", what)
	}
	var resp gophercloud.ErrUnexpectedResponseCode
	var respPtr *gophercloud.ErrUnexpectedResponseCode
	switch {
	case errors.As(err, &respPtr):
		resp = *respPtr
	case errors.As(err, &resp):
	default:
		var netErr net.Error
		if errors.As(err, &netErr) || strings.Contains(err.Error(), "connection refused") {
			return driversdk.Errorf(driversdk.CodeDriverUnavailable, "%s: the cloud's API cannot be reached", what)
		}
		return driversdk.Errorf(driversdk.CodeDriverFailed, "%s: %s", what, scrubbed(err))
	}
	msg := bodyMessage(resp.Body)
	switch {
	case resp.Actual == http.StatusUnauthorized:
		return driversdk.Errorf(codeAuthFailed, "%s: the cloud refused the credentials (401): %s", what, msg)
	case isQuota(resp.Actual, msg):
		return driversdk.Errorf(codeQuota, "%s: %s", what, msg)
	case resp.Actual == http.StatusForbidden:
		return driversdk.Errorf(codeAuthFailed, "%s: the credentials may not do this (403): %s", what, msg)
	case resp.Actual == http.StatusNotFound:
		return driversdk.Errorf(driversdk.CodeVMNotFound, "%s: not found: %s", what, msg)
	case resp.Actual == http.StatusBadRequest:
		return driversdk.Errorf(driversdk.CodeProfileInvalid, "%s: the cloud refused the request: %s", what, msg)
	case resp.Actual == http.StatusTooManyRequests || resp.Actual == http.StatusRequestEntityTooLarge:
		return driversdk.Errorf(driversdk.CodeDriverUnavailable, "%s: still rate limited after %d retries: %s", what, maxRetries, msg)
	case resp.Actual >= 500:
		return driversdk.Errorf(driversdk.CodeDriverUnavailable, "%s: the cloud answered %d: %s", what, resp.Actual, msg)
	}
	return driversdk.Errorf(driversdk.CodeDriverFailed, "%s: the cloud answered %d: %s", what, resp.Actual, msg)
}

// isQuota reports a quota error: Nova answers 403 (or 413 in old
// releases) with "Quota exceeded for instances…"; Neutron 409 with
// OverQuota.
func isQuota(status int, msg string) bool {
	m := strings.ToLower(msg)
	return (status == http.StatusForbidden || status == http.StatusRequestEntityTooLarge || status == http.StatusConflict) &&
		(strings.Contains(m, "quota exceeded") || strings.Contains(m, "overquota") || strings.Contains(m, "quota"))
}

// bodyMessage takes the explanation out of an OpenStack error body:
// Nova's {"forbidden": {"message": …, "code": 403}}, Keystone's {"error":
// {"message": …}}, Neutron's {"NeutronError": {"message": …}}.
func bodyMessage(body []byte) string {
	var outer map[string]json.RawMessage
	if json.Unmarshal(body, &outer) == nil {
		for _, v := range outer {
			var inner struct {
				Message string `json:"message"`
			}
			if json.Unmarshal(v, &inner) == nil && inner.Message != "" {
				return clip(inner.Message)
			}
		}
	}
	return "(no explanation in the answer)"
}

func clip(s string) string {
	const max = 300
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}

// scrubbed is an error's text without anything after a URL's query or
// userinfo, clipped.
func scrubbed(err error) string {
	s := err.Error()
	if i := strings.Index(s, "?"); i >= 0 {
		s = s[:i]
	}
	return clip(s)
}
