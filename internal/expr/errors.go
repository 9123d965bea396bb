package expr

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Sentinel errors; every *Error wraps one of them.
var (
	// ErrSyntax means the text does not parse: a malformed ${ }, or a CEL
	// syntax error.
	ErrSyntax = errors.New("expression syntax error")
	// ErrCheck means the expression parses but does not type-check: an
	// undeclared variable, a function applied to the wrong types.
	ErrCheck = errors.New("expression check error")
	// ErrType means the expression's result type is not the one needed
	// where it is used (a `when` that is not a bool).
	ErrType = errors.New("expression type error")
	// ErrEval means evaluation failed: a missing map key, a division by
	// zero, the cost limit, a cancelled context.
	ErrEval = errors.New("expression evaluation error")
	// ErrInvalid means the CEL implementation itself failed on the
	// expression: it panicked while compiling or evaluating it, and the
	// panic was recovered. The expression must be rewritten; nothing else
	// is affected.
	ErrInvalid = errors.New("invalid expression")
)

// CodeInvalid is the stable code of an ErrInvalid problem.
const CodeInvalid = "expr.invalid"

// Error is a problem with an expression or a template, located in the text
// that was compiled.
type Error struct {
	// Err is ErrSyntax, ErrCheck, ErrType, ErrEval or ErrInvalid.
	Err error
	// Offset is the byte offset of the problem in the text.
	Offset int
	// Line and Column are the 1-based line and character column of
	// Offset in the text.
	Line, Column int
	// Message describes the problem for a user.
	Message string
}

func (e *Error) Error() string {
	if e.Line > 1 {
		return fmt.Sprintf("line %d, column %d: %s", e.Line, e.Column, e.Message)
	}
	return fmt.Sprintf("column %d: %s", e.Column, e.Message)
}

// Unwrap returns the sentinel the error wraps.
func (e *Error) Unwrap() error { return e.Err }

// newError returns an *Error at byte offset off of text.
func newError(kind error, text string, off int, msg string) *Error {
	e := &Error{Err: kind, Message: msg}
	e.locate(text, off)
	return e
}

// locate sets Offset, Line and Column for byte offset off of text.
func (e *Error) locate(text string, off int) {
	off = max(0, min(off, len(text)))
	e.Offset = off
	before := text[:off]
	e.Line = strings.Count(before, "\n") + 1
	e.Column = utf8.RuneCountInString(before[strings.LastIndexByte(before, '\n')+1:]) + 1
}

// shift moves the errors in err, located in a piece of text that starts
// at byte offset base of text, to be located in text.
func shift(err error, text string, base int) error {
	errs := Errors(err)
	if len(errs) == 0 {
		return err
	}
	out := make([]error, len(errs))
	for i, e := range errs {
		c := *e
		c.locate(text, base+e.Offset)
		out[i] = &c
	}
	return join(out)
}

// join returns the only error of errs, or errs joined.
func join(errs []error) error {
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}

// Errors returns the *Error values in err: err itself, or the ones it
// joins. Other errors are left out.
func Errors(err error) []*Error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []*Error
		for _, e := range j.Unwrap() {
			out = append(out, Errors(e)...)
		}
		return out
	}
	var e *Error
	if errors.As(err, &e) {
		return []*Error{e}
	}
	return nil
}
