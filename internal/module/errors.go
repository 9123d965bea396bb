package module

import (
	"errors"
	"fmt"
)

// Sentinel errors of the package. Callers branch on them with errors.Is.
var (
	// ErrInvalidID means a string does not follow the ID grammar.
	ErrInvalidID = errors.New("invalid module id")
	// ErrUnknown means no module is registered under an ID.
	ErrUnknown = errors.New("unknown module")
	// ErrBadParams means a step's params do not match the module's
	// declaration (see ParamError).
	ErrBadParams = errors.New("bad module params")
	// ErrNotImplemented means the module is declared (its params are
	// validated and it appears in the catalog) but this build cannot run
	// it.
	ErrNotImplemented = errors.New("module not implemented in this build")
	// ErrNoExec is returned by the keeper target's Exec: keeper-side
	// modules do not run commands.
	ErrNoExec = errors.New("the keeper target does not run commands")
)

// Codes of module errors, as they appear in run results.
const (
	// CodeNotImplemented is the code of NotImplemented errors.
	CodeNotImplemented = "module.not_implemented"
	// CodeFailed is the code of a module failure that has no more
	// specific code.
	CodeFailed = "module.failed"
)

// Error is a module failure with a stable dotted code, reported in a
// target's result as {code, message}. Message is meant for the user; Err,
// when set, carries the cause for errors.Is and errors.As.
type Error struct {
	Code    string
	Message string
	Err     error
}

func (e *Error) Error() string {
	if e.Err != nil && e.Message == "" {
		return e.Err.Error()
	}
	return e.Message
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// NotImplemented returns the error that declared-only modules return from
// Run: code module.not_implemented, wrapping ErrNotImplemented.
func NotImplemented(id ID) error {
	return &Error{
		Code:    CodeNotImplemented,
		Message: fmt.Sprintf("module %s is declared but not implemented in this build", id),
		Err:     ErrNotImplemented,
	}
}

// Code returns the code of err: the Code of the first *Error in its chain,
// or CodeFailed.
func Code(err error) string {
	var e *Error
	if errors.As(err, &e) && e.Code != "" {
		return e.Code
	}
	return CodeFailed
}
