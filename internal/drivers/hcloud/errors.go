package hcloud

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"

	"github.com/soulstack/soulstack/driversdk"
)

// Error codes of this driver beyond driversdk's.
const (
	// CodeAuthFailed: the token was refused (unauthorized) or may not do
	// this (forbidden: a read-only token).
	CodeAuthFailed = "auth.failed"
	// CodeQuotaExceeded: the project's resource limit (servers, cores,
	// primary IPs) was reached.
	CodeQuotaExceeded = "quota.exceeded"
	// CodeNameTaken: a server of the requested name exists and belongs to
	// another request.
	CodeNameTaken = "hcloud.name_taken"
	// CodeActionFailed: a Hetzner action (create, power, change type)
	// ended in error.
	CodeActionFailed = "hcloud.action_failed"
	// CodeLabelInvalid: an id the keeper passes cannot be a label value.
	CodeLabelInvalid = "hcloud.label_invalid"
)

// mapError turns an hcloud-go error into a *driversdk.Error; op says what
// the driver was doing. It is the one place the SDK's errors are
// translated. The messages carry the API's message and code, never the
// request's headers (and so never the token).
func mapError(op string, err error) error {
	if err == nil {
		return nil
	}
	var de *driversdk.Error
	if errors.As(err, &de) {
		return err
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return driversdk.Errorf(driversdk.CodeDriverTimeout, "%s: the call's deadline passed", op)
	}
	var ae hcloud.ActionError
	if errors.As(err, &ae) {
		cmd := "an action"
		if a := ae.Action(); a != nil {
			cmd = "action " + a.Command
		}
		return driversdk.Errorf(CodeActionFailed, "%s: %s failed: %s (%s)", op, cmd, ae.Message, ae.Code)
	}
	var he hcloud.Error
	if errors.As(err, &he) {
		msg := fmt.Sprintf("%s: %s (hcloud %s)", op, he.Message, he.Code)
		switch he.Code {
		case hcloud.ErrorCodeUnauthorized, hcloud.ErrorCodeForbidden:
			return driversdk.Errorf(CodeAuthFailed, "%s", msg)
		case hcloud.ErrorCodeResourceLimitExceeded:
			return driversdk.Errorf(CodeQuotaExceeded, "%s", msg)
		case hcloud.ErrorCodeNotFound:
			return driversdk.Errorf(driversdk.CodeVMNotFound, "%s", msg)
		case hcloud.ErrorCodeInvalidInput, hcloud.ErrorCodeInvalidServerType, hcloud.ErrorCodePlacementError:
			return &driversdk.Error{Code: driversdk.CodeProfileInvalid, Message: msg}
		case hcloud.ErrorCodeRateLimitExceeded, hcloud.ErrorCodeServiceError, hcloud.ErrorCodeServerError,
			hcloud.ErrorCodeBadGateway, hcloud.ErrorCodeTimeout, hcloud.ErrorCodeMaintenance,
			hcloud.ErrorCodeResourceUnavailable, hcloud.ErrorCodeConflict, hcloud.ErrorCodeLocked:
			return driversdk.Errorf(driversdk.CodeDriverUnavailable, "%s", msg)
		default:
			return driversdk.Errorf("hcloud."+string(he.Code), "%s", msg)
		}
	}
	if errors.Is(err, hcloud.ErrStatusCode) {
		return driversdk.Errorf(driversdk.CodeDriverUnavailable, "%s: the API answered %v", op, err)
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return driversdk.Errorf(driversdk.CodeDriverUnavailable, "%s: the API is unreachable: %v", op, err)
	}
	return driversdk.Errorf(driversdk.CodeDriverFailed, "%s: %v", op, err)
}
