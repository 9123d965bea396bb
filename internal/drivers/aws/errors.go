package aws

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/soulstack/soulstack/driversdk"
)

// Error codes this driver reports beyond driversdk's.
const (
	CodeQuotaExceeded = "quota.exceeded"
	CodeAuthFailed    = "auth.failed"
	// CodeVMTerminated: the instance an idempotency token names was
	// terminated, and every spare token was used up.
	CodeVMTerminated = "vm.terminated"
)

// apiCode returns the EC2 error code in err's chain, or "".
func apiCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// mapError translates an SDK error into a *driversdk.Error: the one place
// where EC2's error codes become the driver's. op says what was being
// done. The message is built from the code and EC2's own message, which
// never carries the credentials (the SDK signs, it does not echo keys);
// the credentials are never formatted into any error.
func mapError(op string, err error) error {
	if err == nil {
		return nil
	}
	var de *driversdk.Error
	if errors.As(err, &de) {
		return de
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return driversdk.Errorf(driversdk.CodeDriverTimeout, "%s: the call's deadline passed", op)
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		code, msg := ae.ErrorCode(), ae.ErrorMessage()
		detail := fmt.Sprintf("%s: EC2 answered %s: %s", op, code, msg)
		switch code {
		case "InstanceLimitExceeded", "VcpuLimitExceeded", "MaxSpotInstanceCountExceeded", "VolumeLimitExceeded",
			"AddressLimitExceeded", "InsufficientFreeAddressesInSubnet":
			return &driversdk.Error{Code: CodeQuotaExceeded, Message: detail, Field: "count"}
		case "AuthFailure", "UnauthorizedOperation", "InvalidClientTokenId", "SignatureDoesNotMatch",
			"ExpiredToken", "RequestExpired", "OptInRequired", "Blocked", "PendingVerification":
			// The message of UnauthorizedOperation may carry an encoded
			// authorization message; it names actions, not keys.
			return driversdk.Errorf(CodeAuthFailed, "%s: EC2 refused the credentials (%s): %s", op, code, msg)
		case "InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed":
			return driversdk.Errorf(driversdk.CodeVMNotFound, "%s: %s", op, msg)
		case "InvalidAMIID.NotFound", "InvalidAMIID.Malformed", "InvalidAMIID.Unavailable":
			return &driversdk.Error{Code: driversdk.CodeProfileInvalid, Field: "image_id", Message: detail}
		case "InvalidSubnetID.NotFound", "InvalidSubnet":
			return &driversdk.Error{Code: driversdk.CodeProfileInvalid, Field: "subnet_id", Message: detail}
		case "InvalidGroup.NotFound", "InvalidGroupId.Malformed":
			return &driversdk.Error{Code: driversdk.CodeProfileInvalid, Field: "security_group_ids", Message: detail}
		case "InvalidKeyPair.NotFound":
			return &driversdk.Error{Code: driversdk.CodeProfileInvalid, Field: "key_name", Message: detail}
		case "Unsupported", "InvalidInstanceType", "UnsupportedOperation":
			return &driversdk.Error{Code: driversdk.CodeProfileInvalid, Field: "instance_type", Message: detail}
		case "InvalidParameterValue", "InvalidParameterCombination", "InvalidParameter", "MissingParameter",
			"InvalidBlockDeviceMapping", "InvalidUserData.Malformed":
			return &driversdk.Error{Code: driversdk.CodeProfileInvalid, Message: detail}
		case "InsufficientInstanceCapacity", "InsufficientCapacity", "RequestLimitExceeded", "ServiceUnavailable",
			"Unavailable", "InternalError", "InternalFailure":
			return driversdk.Errorf(driversdk.CodeDriverUnavailable, "%s", detail)
		}
		var re *smithyhttp.ResponseError
		if errors.As(err, &re) && re.HTTPStatusCode() >= 500 {
			return driversdk.Errorf(driversdk.CodeDriverUnavailable, "%s", detail)
		}
		return driversdk.Errorf("ec2."+code, "%s", detail)
	}
	var ne net.Error
	var oe *net.OpError
	if errors.As(err, &ne) || errors.As(err, &oe) {
		return driversdk.Errorf(driversdk.CodeDriverUnavailable, "%s: EC2's API cannot be reached: %v", op, err)
	}
	return driversdk.Errorf(driversdk.CodeDriverUnavailable, "%s: %v", op, err)
}
