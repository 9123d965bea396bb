package transport

import (
	"fmt"
	"strings"
)

// EnvReserved prefixes the variables the SSH transport's environment
// prologue uses itself: a Command's Env may not use it, on any transport,
// so that a command means the same over SSH and through the agent.
const EnvReserved = "__soulstack_"

// CheckEnv reports why name=value cannot be in a Command's Env: a name
// that is not a shell identifier or starts with EnvReserved, a value with
// a NUL byte. Each transport wraps the error with its own invalid-command
// sentinel.
func CheckEnv(name, value string) error {
	switch {
	case !isName(name):
		return fmt.Errorf("environment variable name %q is not a shell identifier", name)
	case strings.HasPrefix(name, EnvReserved):
		return fmt.Errorf("environment variable names starting with %s are reserved", EnvReserved)
	case strings.IndexByte(value, 0) >= 0:
		return fmt.Errorf("environment variable %s contains a NUL byte", name)
	}
	return nil
}

func isName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || i > 0 && '0' <= c && c <= '9' {
			continue
		}
		return false
	}
	return true
}
