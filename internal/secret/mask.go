// Package secret holds the one masking function every output channel passes
// through, and the credentials references (env:, file:, vault:) that stand in
// for secrets in the registries.
package secret

import (
	"bytes"
	"encoding/json"
	"sort"
	"strings"
	"sync"
)

// Masked is what a secret value is replaced with.
const Masked = "***"

// sensitiveFragments are the substrings that make a key secret-looking.
var sensitiveFragments = []string{"token", "password", "secret", "private_key", "credentials"}

// IsSensitiveKey reports whether the value under key must be masked: the
// lower-cased key contains token, password, secret, private_key or
// credentials. Keys ending in "_ref" (credentials_ref, key_ref) name a
// reference such as env:NAME, never the secret itself, and are not masked.
func IsSensitiveKey(key string) bool {
	k := strings.ToLower(key)
	if strings.HasSuffix(k, "_ref") {
		return false
	}
	for _, f := range sensitiveFragments {
		if strings.Contains(k, f) {
			return true
		}
	}
	return false
}

// known holds the text of secrets resolved in this process (credentials,
// generated tokens); Mask replaces them wherever they appear.
var known struct {
	sync.RWMutex
	values []string
}

// minKnownLen keeps very short values from being registered: masking "a"
// everywhere would destroy output without protecting anything.
const minKnownLen = 6

// Register records the text of a resolved secret so that Mask and MaskString
// replace it wherever it appears, under any key. Values shorter than six
// characters are ignored.
func Register(value string) {
	if len(value) < minKnownLen {
		return
	}
	known.Lock()
	defer known.Unlock()
	for _, v := range known.values {
		if v == value {
			return
		}
	}
	known.values = append(known.values, value)
	// Longest first, so that a secret containing another is replaced whole.
	sort.Slice(known.values, func(i, j int) bool { return len(known.values[i]) > len(known.values[j]) })
}

// MaskString replaces the text of every registered secret in s.
func MaskString(s string) string {
	known.RLock()
	defer known.RUnlock()
	for _, v := range known.values {
		if strings.Contains(s, v) {
			s = strings.ReplaceAll(s, v, Masked)
		}
	}
	return s
}

// Mask returns a copy of v, a JSON-like value (maps, slices, strings,
// numbers, structs that marshal to JSON), in which the value under every
// secret-looking key (IsSensitiveKey) is replaced by "***" at any depth, and
// the text of every registered secret is replaced wherever it appears. Mask
// is the one masking function: API responses, log lines, audit payloads and
// events all pass through it. v itself is never modified.
func Mask(v any) any {
	switch x := v.(type) {
	case nil, bool, float64, int, int64, json.Number:
		return x
	case string:
		return MaskString(x)
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, val := range x {
			if IsSensitiveKey(k) && val != nil {
				out[k] = Masked
				continue
			}
			out[k] = Mask(val)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, val := range x {
			out[i] = Mask(val)
		}
		return out
	case map[string]string:
		out := make(map[string]any, len(x))
		for k, val := range x {
			out[k] = val
		}
		return Mask(out)
	case []string:
		out := make([]any, len(x))
		for i, val := range x {
			out[i] = val
		}
		return Mask(out)
	case json.RawMessage:
		return Mask(generic(x))
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return Masked
		}
		return Mask(generic(b))
	}
}

// MaskJSON masks a JSON document; text that is not JSON is masked as a string.
func MaskJSON(doc []byte) []byte {
	var v any
	if err := unmarshalNumber(doc, &v); err != nil {
		return []byte(MaskString(string(doc)))
	}
	out, err := json.Marshal(Mask(v))
	if err != nil {
		return []byte(Masked)
	}
	return out
}

func generic(b []byte) any {
	var v any
	if err := unmarshalNumber(b, &v); err != nil {
		return MaskString(string(b))
	}
	return v
}

func unmarshalNumber(b []byte, v *any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	return dec.Decode(v)
}
