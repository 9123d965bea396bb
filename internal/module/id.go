package module

import (
	"fmt"
	"strings"
)

// ID names one state of a module: "namespace.module.state", for example
// "core.cloud.created". It is stored in runs and audit events, so it is a
// stable string chosen by the module's author, never derived from a Go type
// name.
//
// The grammar is three dot-separated identifiers, each a lower-case letter
// followed by lower-case letters, digits or underscores, at most 63
// characters each:
//
//	id         = identifier "." identifier "." identifier
//	identifier = [a-z] [a-z0-9_]*
type ID string

// maxSegment is the longest identifier allowed in one segment of an ID.
const maxSegment = 63

// ParseID checks s against the ID grammar and returns it as an ID.
func ParseID(s string) (ID, error) {
	if s == "" {
		return "", fmt.Errorf("module id is empty: %w", ErrInvalidID)
	}
	parts := strings.Split(s, ".")
	if len(parts) != 3 {
		return "", fmt.Errorf("module id %q has %d dot-separated parts, want 3 (namespace.module.state): %w", s, len(parts), ErrInvalidID)
	}
	for _, p := range parts {
		if err := checkIdentifier(p); err != nil {
			return "", fmt.Errorf("module id %q: %v: %w", s, err, ErrInvalidID)
		}
	}
	return ID(s), nil
}

// checkIdentifier reports why s is not an identifier of the ID grammar.
func checkIdentifier(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("empty segment")
	case len(s) > maxSegment:
		return fmt.Errorf("segment %q is longer than %d characters", s, maxSegment)
	case s[0] < 'a' || s[0] > 'z':
		return fmt.Errorf("segment %q must start with a lower-case letter", s)
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
			return fmt.Errorf("segment %q may hold only lower-case letters, digits and '_'", s)
		}
	}
	return nil
}

// Valid reports whether id follows the ID grammar.
func (id ID) Valid() bool {
	_, err := ParseID(string(id))
	return err == nil
}

// Namespace returns the first segment of id ("core"), or "" when id is
// not valid.
func (id ID) Namespace() string { return id.segment(0) }

// Module returns the second segment of id ("cloud"), or "" when id is not
// valid.
func (id ID) Module() string { return id.segment(1) }

// State returns the last segment of id ("created"), or "" when id is not
// valid.
func (id ID) State() string { return id.segment(2) }

// Family returns "namespace.module" ("core.cloud"): the module whose states
// share one catalog family. It returns "" when id is not valid.
func (id ID) Family() string {
	if !id.Valid() {
		return ""
	}
	return id.segment(0) + "." + id.segment(1)
}

func (id ID) segment(i int) string {
	if !id.Valid() {
		return ""
	}
	return strings.Split(string(id), ".")[i]
}

// String returns id as a plain string.
func (id ID) String() string { return string(id) }
