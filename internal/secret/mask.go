// Package secret holds the one masking function every output channel passes
// through, the per-run sets of secret values it masks, the data key that
// seals secrets at rest, and the credentials references (env:, file:,
// vault:) that stand in for secrets in the registries.
//
// Masking replaces, with "***": the value under any secret-looking key
// (IsSensitiveKey); anything that looks like a token the keeper makes (sst_
// API tokens, sbt_ bootstrap tokens), wherever it appears; the text of the
// keeper's own secrets (Register); and, for a run's data only, the text of
// the secrets that run has seen (Set). The package functions (Mask,
// MaskString, MarshalMasked, MaskJSON, NewLogHandler) mask for the keeper as
// a whole; the same methods on a *Set mask one run's data.
package secret

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
)

// Masked is what a secret value is replaced with.
const Masked = "***"

// sensitiveFragments are the substrings that make a key secret-looking.
var sensitiveFragments = []string{
	"token", "password", "secret", "private_key", "credentials",
	"api_key", "apikey", "access_key", "privatekey", "passphrase", "passwd",
}

// IsSensitiveKey reports whether the value under key must be masked: the
// lower-cased key contains token, password, secret, private_key,
// credentials, api_key, apikey, access_key, privatekey, passphrase or
// passwd, hyphens read as underscores (X-Api-Key). Keys ending in "_ref"
// (credentials_ref, key_ref) name a reference such as env:NAME, never the
// secret itself, and are not masked.
func IsSensitiveKey(key string) bool {
	k := strings.ReplaceAll(strings.ToLower(key), "-", "_") // X-Api-Key too
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

// MaskString masks s: token patterns.
func MaskString(s string) string { return masker{}.str(s) }

// MaskString masks s: token patterns and the keeper's secrets.
func (k *Keeper) MaskString(s string) string { return k.masker().str(s) }

// Mask returns a copy of v, a JSON-like value (maps, slices, strings,
// numbers, structs that marshal to JSON), in which the value under every
// secret-looking key (IsSensitiveKey) is replaced by "***" at any depth, and
// token patterns are replaced wherever they appear. v itself is never
// modified. The keeper's channels mask with its Keeper (Keeper.Mask: its
// secrets as well), a run's data with the run's Set.
func Mask(v any) any { return masker{}.mask(v) }

// Mask is Mask (the package function) with the keeper's secrets as well:
// API responses, log lines, audit payloads and webhooks all pass through
// it.
func (k *Keeper) Mask(v any) any { return k.masker().mask(v) }

// MarshalMasked returns the JSON encoding of Mask(v), byte for byte what a
// json.Encoder with SetEscapeHTML(false) writes for Mask(v), without the
// trailing newline. For a struct, or any value Mask handles by marshalling
// it, MarshalMasked marshals v once and rewrites that document (object keys
// sorted with the last duplicate kept, secrets masked) instead of building
// Mask's generic copy and encoding it again; the API masks every response
// body this way.
func MarshalMasked(v any) ([]byte, error) { return masker{}.marshal(v) }

// MarshalMasked is MarshalMasked (the package function) with the keeper's
// secrets as well.
func (k *Keeper) MarshalMasked(v any) ([]byte, error) { return k.masker().marshal(v) }

// MaskJSON masks a JSON document; text that is not JSON is masked as a string.
func MaskJSON(doc []byte) []byte { return masker{}.maskJSON(doc) }

// MaskJSON is MaskJSON (the package function) with the keeper's secrets
// as well.
func (k *Keeper) MaskJSON(doc []byte) []byte { return k.masker().maskJSON(doc) }

// MaskString is MaskString (the package function) with the run's secrets
// as well.
func (s *Set) MaskString(v string) string { return s.masker().str(v) }

// Mask is Mask (the package function) with the run's secrets as well.
func (s *Set) Mask(v any) any { return s.masker().mask(v) }

// MarshalMasked is MarshalMasked with the run's secrets as well.
func (s *Set) MarshalMasked(v any) ([]byte, error) { return s.masker().marshal(v) }

// MaskJSON is MaskJSON with the run's secrets as well.
func (s *Set) MaskJSON(doc []byte) []byte { return s.masker().maskJSON(doc) }

// mask is the value masker: it walks a decoded value.
func (m masker) mask(v any) any {
	switch x := v.(type) {
	case nil, bool, float64, int, int64, json.Number:
		return x
	case string:
		return m.str(x)
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, val := range x {
			if IsSensitiveKey(k) && val != nil {
				out[k] = Masked
				continue
			}
			out[k] = m.mask(val)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, val := range x {
			out[i] = m.mask(val)
		}
		return out
	case map[string]string:
		out := make(map[string]any, len(x))
		for k, val := range x {
			out[k] = val
		}
		return m.mask(out)
	case []string:
		out := make([]any, len(x))
		for i, val := range x {
			out[i] = val
		}
		return m.mask(out)
	case json.RawMessage:
		return m.mask(m.generic(x))
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return Masked
		}
		return m.mask(m.generic(b))
	}
}

func (m masker) marshal(v any) ([]byte, error) {
	switch v.(type) {
	case nil, bool, float64, int, int64, json.Number, string, map[string]any, []any, map[string]string, []string, json.RawMessage:
		return encodeNoHTML(m.mask(v))
	}
	doc, err := json.Marshal(v)
	if err != nil {
		return encodeNoHTML(Masked)
	}
	return m.rewrite(doc)
}

// rewrite is the streaming masker: it masks doc, a document written by
// json.Marshal, in one pass, with the result encodeNoHTML(m.mask(doc
// decoded with UseNumber)) would give.
func (m masker) rewrite(doc []byte) ([]byte, error) {
	r := rewriter{src: doc, m: m, out: make([]byte, 0, len(doc)+len(doc)/8)}
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
	src  []byte
	text string // src as a string, once a plain value needs masking
	m    masker
	out  []byte
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
		return r.valueStr(i, j)
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

// valueStr writes the string value at src[i:j] masked. A plain string is
// masked as a substring of the document's text, made once per document and
// only when the masker could change something: a response without secrets
// costs no allocation per string.
func (r *rewriter) valueStr(i, j int) error {
	raw := r.src[i:j]
	if !plain(raw) {
		return r.str(raw, true)
	}
	if !r.m.redact && len(r.m.values) == 0 && !bytes.Contains(raw, []byte("t_")) {
		r.out = append(r.out, raw...)
		return nil
	}
	if r.text == "" {
		r.text = string(r.src)
	}
	text := r.text[i+1 : j-1]
	if m := r.m.str(text); m != text {
		r.out = append(append(append(r.out, '"'), m...), '"') // plain text stays plain
		return nil
	}
	r.out = append(r.out, raw...)
	return nil
}

// str writes the quoted string raw re-encoded, masking it if mask is set
// (values are masked, keys are not).
func (r *rewriter) str(raw []byte, mask bool) error {
	if plain(raw) {
		if !mask {
			r.out = append(r.out, raw...)
			return nil
		}
		s := string(raw[1 : len(raw)-1])
		if m := r.m.str(s); m != s {
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
		s = r.m.str(s)
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

func (m masker) maskJSON(doc []byte) []byte {
	var v any
	if err := unmarshalNumber(doc, &v); err != nil {
		return []byte(m.str(string(doc)))
	}
	out, err := json.Marshal(m.mask(v))
	if err != nil {
		return []byte(Masked)
	}
	return out
}

// generic decodes b, or masks it as text when it is not JSON.
func (m masker) generic(b []byte) any {
	var v any
	if err := unmarshalNumber(b, &v); err != nil {
		return m.str(string(b))
	}
	return v
}

func unmarshalNumber(b []byte, v *any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	return dec.Decode(v)
}
