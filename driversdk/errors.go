package driversdk

import "errors"

// Error codes with a meaning every driver and the keeper share. A driver may
// use other dotted codes (quota.exceeded, image.not_found…); the keeper
// passes them on unchanged.
const (
	// CodeProfileInvalid: the profile spec or the provider's config is wrong;
	// Error.Field names the field.
	CodeProfileInvalid = "profile.invalid"
	// CodeVMNotFound: a VM ID the driver never knew.
	CodeVMNotFound = "vm.not_found"
	// CodeResizeUnsupported: Resize on a driver that is not Resizable.
	CodeResizeUnsupported = "resize.unsupported"
	// CodeListUnsupported: List on a driver that is not Listable.
	CodeListUnsupported = "list.unsupported"
	// CodeDriverFailed: the driver returned an error that is not an *Error.
	CodeDriverFailed = "driver.failed"
	// CodeDriverUnavailable: the driver cannot work here (missing tools,
	// not root, the cloud's API unreachable).
	CodeDriverUnavailable = "driver.unavailable"
	// CodeDriverTimeout: the call's deadline passed. Either the driver gave
	// up in time, or it did not answer and the keeper killed its process.
	CodeDriverTimeout = "driver.timeout"
	// CodeDriverCrashed: the plugin process died during the call, or the
	// connection to it broke. The keeper starts a new one for the next call.
	CodeDriverCrashed = "driver.crashed"
	// CodeDriverNotFound: no soul-cloud-<driver> executable was found, or
	// the driver name is not a valid one.
	CodeDriverNotFound = "driver.not_found"
	// CodeDriverIncompatible: the executable is not a CloudDriver plugin, or
	// speaks a protocol version the keeper does not.
	CodeDriverIncompatible = "driver.incompatible"
	// CodeDriverUntrusted: the executable, or a directory it is in, could
	// be changed by someone other than the keeper's user or root (another
	// owner, group- or world-writable). It was not started.
	CodeDriverUntrusted = "driver.untrusted"
)

// Is reports whether target is an *Error with the same Code and no Message
// or Field, so that a bare code can be matched anywhere in a chain:
//
//	errors.Is(err, &driversdk.Error{Code: driversdk.CodeVMNotFound})
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code && t.Message == "" && t.Field == ""
}

// CodeOf returns the Code of the first *Error in err's chain, or "" when
// there is none (and for a nil err).
func CodeOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// InvalidProfile returns an *Error with code profile.invalid naming field.
func InvalidProfile(field, message string) *Error {
	return &Error{Code: CodeProfileInvalid, Field: field, Message: message}
}
