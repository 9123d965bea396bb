package secret

import "strings"

// tokenPrefixes are the prefixes of the tokens the keeper makes: API
// tokens (sst_, internal/auth) and one-time bootstrap tokens (sbt_, the
// cloud module). Both are the prefix and 43 characters of base64url.
var tokenPrefixes = []string{"sst_", "sbt_"}

// minTokenTail is how many base64url characters after a prefix make text
// look like a token. A real token has 43; fewer would still reveal bits of
// a truncated one, and a shorter tail (sst_not-a-token) is left alone.
const minTokenTail = 16

// maskTokens replaces every run of text that looks like a token the keeper
// makes — a prefix from tokenPrefixes followed by at least minTokenTail
// base64url characters — with Masked, whoever registered it or not.
func maskTokens(s string) string {
	if !strings.Contains(s, "t_") {
		return s // fast path: no prefix can be there
	}
	var b strings.Builder
	rest := s
	changed := false
	for {
		i := nextToken(rest)
		if i < 0 {
			break
		}
		end := i + 4
		for end < len(rest) && isBase64URL(rest[end]) {
			end++
		}
		if end-(i+4) < minTokenTail {
			b.WriteString(rest[:i+4])
			rest = rest[i+4:]
			continue
		}
		changed = true
		b.WriteString(rest[:i])
		b.WriteString(Masked)
		rest = rest[end:]
	}
	if !changed {
		return s
	}
	b.WriteString(rest)
	return b.String()
}

// nextToken is the index of the first token prefix in s, or -1.
func nextToken(s string) int {
	best := -1
	for _, p := range tokenPrefixes {
		if i := strings.Index(s, p); i >= 0 && (best < 0 || i < best) {
			best = i
		}
	}
	return best
}

func isBase64URL(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}
