package secret

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
)

// sealPrefix marks sealed text and its format version.
const sealPrefix = "sealed:v1:"

// ErrSealed is returned when sealed text cannot be opened: a different
// data key, or text that was changed.
var ErrSealed = errors.New("sealed data cannot be opened with this keeper's data key")

// Sealer encrypts data the keeper must keep at rest but never in clear
// (secret run inputs, unmasked step outputs) with AES-256-GCM under the
// keeper's data key.
type Sealer struct {
	aead cipher.AEAD
	mac  []byte // HMAC key derived from the data key
}

// NewSealer returns a sealer for a 32-byte key.
func NewSealer(key []byte) (*Sealer, error) {
	if len(key) != 32 {
		return nil, fmt.Errorf("data key: want 32 bytes, got %d", len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	derived := hmac.New(sha256.New, key)
	derived.Write([]byte("soulstack digest key v1"))
	return &Sealer{aead: aead, mac: derived.Sum(nil)}, nil
}

// Digest returns a keyed hash (HMAC-SHA256) of data: equal data gives equal
// digests, but a digest of a low-entropy secret cannot be guessed without
// the data key.
func (s *Sealer) Digest(data []byte) string {
	m := hmac.New(sha256.New, s.mac)
	m.Write(data)
	return hex.EncodeToString(m.Sum(nil))
}

// LoadOrCreateKey reads the base64 data key at path, creating it (mode
// 0600) with 32 random bytes when it does not exist.
func LoadOrCreateKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		key := make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, err
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return nil, fmt.Errorf("create data key: %w", err)
		}
		if _, err := f.WriteString(base64.StdEncoding.EncodeToString(key) + "\n"); err != nil {
			f.Close()
			return nil, fmt.Errorf("write data key: %w", err)
		}
		return key, f.Close()
	}
	if err != nil {
		return nil, fmt.Errorf("read data key: %w", err)
	}
	return DecodeKey(string(b))
}

// DecodeKey decodes a base64 data key (from a file or an env: reference).
func DecodeKey(s string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil || len(key) != 32 {
		return nil, errors.New("data key: want 32 bytes in base64")
	}
	return key, nil
}

// Seal encrypts plaintext; the result is printable text.
func (s *Sealer) Seal(plaintext []byte) string {
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		panic("secret: crypto/rand failed: " + err.Error())
	}
	return sealPrefix + base64.StdEncoding.EncodeToString(s.aead.Seal(nonce, nonce, plaintext, nil))
}

// Open decrypts text made by Seal.
func (s *Sealer) Open(sealed string) ([]byte, error) {
	raw, ok := strings.CutPrefix(sealed, sealPrefix)
	if !ok {
		return nil, fmt.Errorf("%w: not sealed text", ErrSealed)
	}
	b, err := base64.StdEncoding.DecodeString(raw)
	if err != nil || len(b) < s.aead.NonceSize() {
		return nil, ErrSealed
	}
	out, err := s.aead.Open(nil, b[:s.aead.NonceSize()], b[s.aead.NonceSize():], nil)
	if err != nil {
		return nil, ErrSealed
	}
	return out, nil
}

// SealFields returns doc, a JSON document, with the value under every
// secret-looking key (IsSensitiveKey) at any depth replaced by the sealed
// text of that value's JSON: a provider's config is stored this way, so that
// the database never holds its API keys in clear. Null values stay null; a
// document that is not a JSON object or array is returned as it is.
func (s *Sealer) SealFields(doc json.RawMessage) (json.RawMessage, error) {
	return s.SealInput(doc, nil)
}

// SealInput is SealFields that also seals the top-level values of doc
// under names, whatever they are called: a seed's input, whose scenario
// declares which of its inputs are secret.
func (s *Sealer) SealInput(doc json.RawMessage, names []string) (json.RawMessage, error) {
	return s.fields(doc, names, func(raw json.RawMessage) (any, error) {
		if string(raw) == "null" {
			return nil, nil
		}
		return s.Seal(raw), nil
	})
}

// OpenFields reverses SealFields: every sealed string under a
// secret-looking key is replaced by the value it seals. A value that is not
// sealed text (stored before sealing existed) is left as it is; sealed text
// this keeper's data key cannot open is an error wrapping ErrSealed.
func (s *Sealer) OpenFields(doc json.RawMessage) (json.RawMessage, error) {
	return s.OpenInput(doc, nil)
}

// OpenInput reverses SealInput with the same names.
func (s *Sealer) OpenInput(doc json.RawMessage, names []string) (json.RawMessage, error) {
	return s.fields(doc, names, func(raw json.RawMessage) (any, error) {
		var text string
		if json.Unmarshal(raw, &text) != nil || !strings.HasPrefix(text, sealPrefix) {
			return raw, nil
		}
		plain, err := s.Open(text)
		if err != nil {
			return nil, err
		}
		return json.RawMessage(plain), nil
	})
}

// fields rewrites the values under secret-looking keys of doc, and under
// the top-level keys names, with f.
func (s *Sealer) fields(doc json.RawMessage, names []string, f func(json.RawMessage) (any, error)) (json.RawMessage, error) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	if len(bytes.TrimSpace(doc)) == 0 || dec.Decode(&v) != nil {
		return doc, nil
	}
	var walk func(v any, top bool) (any, error)
	walk = func(v any, top bool) (any, error) {
		switch x := v.(type) {
		case map[string]any:
			out := make(map[string]any, len(x))
			for k, val := range x {
				var err error
				if IsSensitiveKey(k) || top && slices.Contains(names, k) {
					raw, merr := json.Marshal(val)
					if merr != nil {
						return nil, merr
					}
					out[k], err = f(raw)
				} else {
					out[k], err = walk(val, false)
				}
				if err != nil {
					return nil, fmt.Errorf("%s: %w", k, err)
				}
			}
			return out, nil
		case []any:
			out := make([]any, len(x))
			for i, val := range x {
				var err error
				if out[i], err = walk(val, false); err != nil {
					return nil, err
				}
			}
			return out, nil
		default:
			return v, nil
		}
	}
	switch v.(type) {
	case map[string]any, []any:
	default:
		return doc, nil
	}
	out, err := walk(v, true)
	if err != nil {
		return nil, err
	}
	return json.Marshal(out)
}
