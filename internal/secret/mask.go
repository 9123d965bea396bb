// Package secret holds the one masking function every output channel passes
// through, and the credentials references (env:, file:, vault:) that stand in
// for secrets in the registries.
package secret

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
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
	return replaceKnown(s, known.values)
}

// replaceKnown replaces every value of known in s; the caller holds
// known's read lock.
func replaceKnown(s string, known []string) string {
	for _, v := range known {
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

// MarshalMasked returns the JSON encoding of Mask(v), byte for byte what a
// json.Encoder with SetEscapeHTML(false) writes for Mask(v), without the
// trailing newline. For a struct, or any value Mask handles by marshalling
// it, MarshalMasked marshals v once and rewrites that document (object keys
// sorted with the last duplicate kept, secrets masked) instead of building
// Mask's generic copy and encoding it again; the API masks every response
// body this way.
func MarshalMasked(v any) ([]byte, error) {
	switch v.(type) {
	case nil, bool, float64, int, int64, json.Number, string, map[string]any, []any, map[string]string, []string, json.RawMessage:
		return encodeNoHTML(Mask(v))
	}
	doc, err := json.Marshal(v)
	if err != nil {
		return encodeNoHTML(Masked)
	}
	known.RLock()
	defer known.RUnlock()
	r := rewriter{src: doc, known: known.values, out: make([]byte, 0, len(doc)+len(doc)/8)}
	if err := r.value(0, len(doc)); err != nil {
		return nil, err
	}
	return r.out, nil
}

// encodeNoHTML encodes v as the API's responses are encoded, without the
// trailing newline.
func encodeNoHTML(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// rewriter turns a document written by json.Marshal into the encoding of
// Mask applied to it decoded with UseNumber: numbers, true, false and null
// are copied; strings are masked and re-encoded; object members are sorted
// by decoded key, the last of duplicates kept, and the value under a
// sensitive key that is not null becomes "***".
type rewriter struct {
	src   []byte
	known []string
	out   []byte
}

// member is an object member: its decoded key, the key as written, and
// where its value starts and ends in src.
type member struct {
	key, raw   []byte
	start, end int
}

var errSyntax = errors.New("secret: malformed JSON from json.Marshal")

// value rewrites the value at src[i:end] (i may point at whitespace).
func (r *rewriter) value(i, end int) error {
	i = skipSpace(r.src, i)
	if i >= end {
		return errSyntax
	}
	switch r.src[i] {
	case '{':
		return r.object(i)
	case '[':
		return r.array(i)
	case '"':
		j, err := skipString(r.src, i)
		if err != nil {
			return err
		}
		return r.str(r.src[i:j], true)
	default:
		j := skipScalar(r.src, i)
		r.out = append(r.out, r.src[i:j]...)
		return nil
	}
}

func (r *rewriter) object(i int) error {
	var buf [16]member // most objects fit: no allocation
	members := buf[:0]
	i = skipSpace(r.src, i+1)
	if i < len(r.src) && r.src[i] == '}' {
		r.out = append(r.out, '{', '}')
		return nil
	}
	for {
		i = skipSpace(r.src, i)
		if i >= len(r.src) || r.src[i] != '"' {
			return errSyntax
		}
		k, err := skipString(r.src, i)
		if err != nil {
			return err
		}
		raw := r.src[i:k]
		key := raw[1 : len(raw)-1]
		if !plain(raw) {
			s, err := decodeString(raw)
			if err != nil {
				return err
			}
			key = []byte(s)
		}
		i = skipSpace(r.src, k)
		if i >= len(r.src) || r.src[i] != ':' {
			return errSyntax
		}
		start := skipSpace(r.src, i+1)
		end, err := skipValue(r.src, start)
		if err != nil {
			return err
		}
		members = append(members, member{key: key, raw: raw, start: start, end: end})
		i = skipSpace(r.src, end)
		if i >= len(r.src) {
			return errSyntax
		}
		if r.src[i] == '}' {
			break
		}
		if r.src[i] != ',' {
			return errSyntax
		}
		i++
	}
	slices.SortStableFunc(members, func(a, b member) int { return bytes.Compare(a.key, b.key) })
	r.out = append(r.out, '{')
	first := true
	for n, m := range members {
		if n+1 < len(members) && bytes.Equal(members[n+1].key, m.key) {
			continue // a later duplicate wins, as in a decoded map
		}
		if !first {
			r.out = append(r.out, ',')
		}
		first = false
		if err := r.str(m.raw, false); err != nil {
			return err
		}
		r.out = append(r.out, ':')
		if IsSensitiveKey(string(m.key)) && !bytes.Equal(r.src[m.start:m.end], []byte("null")) {
			r.out = append(r.out, `"`+Masked+`"`...)
			continue
		}
		if err := r.value(m.start, m.end); err != nil {
			return err
		}
	}
	r.out = append(r.out, '}')
	return nil
}

func (r *rewriter) array(i int) error {
	r.out = append(r.out, '[')
	i = skipSpace(r.src, i+1)
	if i < len(r.src) && r.src[i] == ']' {
		r.out = append(r.out, ']')
		return nil
	}
	for {
		end, err := skipValue(r.src, i)
		if err != nil {
			return err
		}
		if err := r.value(i, end); err != nil {
			return err
		}
		i = skipSpace(r.src, end)
		if i >= len(r.src) {
			return errSyntax
		}
		if r.src[i] == ']' {
			r.out = append(r.out, ']')
			return nil
		}
		if r.src[i] != ',' {
			return errSyntax
		}
		r.out = append(r.out, ',')
		i++
	}
}

// str writes the quoted string raw re-encoded, masking registered secrets
// in it if mask is set (values are masked, keys are not).
func (r *rewriter) str(raw []byte, mask bool) error {
	if plain(raw) {
		if !mask || len(r.known) == 0 {
			r.out = append(r.out, raw...)
			return nil
		}
		s := string(raw[1 : len(raw)-1])
		if m := replaceKnown(s, r.known); m != s {
			r.out = append(append(append(r.out, '"'), m...), '"') // plain text stays plain
			return nil
		}
		r.out = append(r.out, raw...)
		return nil
	}
	s, err := decodeString(raw)
	if err != nil {
		return err
	}
	if mask {
		s = replaceKnown(s, r.known)
	}
	b, err := encodeNoHTML(s)
	if err != nil {
		return err
	}
	r.out = append(r.out, b...)
	return nil
}

// plain reports whether the quoted string raw is printable ASCII without
// escapes: then it decodes to its own text and encodes back unchanged.
func plain(raw []byte) bool {
	for _, c := range raw[1 : len(raw)-1] {
		if c < 0x20 || c >= 0x80 || c == '\\' {
			return false
		}
	}
	return true
}

func decodeString(raw []byte) (string, error) {
	if plain(raw) {
		return string(raw[1 : len(raw)-1]), nil
	}
	var s string
	err := json.Unmarshal(raw, &s)
	return s, err
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index just past the string that starts at b[i].
func skipString(b []byte, i int) (int, error) {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1, nil
		}
	}
	return 0, errSyntax
}

// skipScalar returns the index just past the number or literal at b[i].
func skipScalar(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
		i++
	}
	return i
}

// skipValue returns the index just past the value that starts at b[i].
func skipValue(b []byte, i int) (int, error) {
	if i >= len(b) {
		return 0, errSyntax
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				k, err := skipString(b, j)
				if err != nil {
					return 0, err
				}
				j = k - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, nil
				}
			}
		}
		return 0, errSyntax
	default:
		return skipScalar(b, i), nil
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
