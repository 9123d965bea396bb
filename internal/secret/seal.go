package secret

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
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
