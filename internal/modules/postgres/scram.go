package postgres

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
)

// scramIterations is the PBKDF2 iteration count of the verifiers
// scramVerifier makes, PostgreSQL's default (scram_iterations).
const scramIterations = 4096

// scramVerifier returns the SCRAM-SHA-256 verifier PostgreSQL stores for
// password, with a random salt, in the form CREATE ROLE and ALTER ROLE
// accept instead of the password ("SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>",
// RFC 5803), so the password itself never appears in a statement the
// server could log. ok is false when password is not printable ASCII:
// PostgreSQL prepares other passwords with SASLprep, which this does not
// implement, and the caller must send the password instead.
func scramVerifier(password string) (v string, ok bool, err error) {
	for i := 0; i < len(password); i++ {
		if password[i] < 0x20 || password[i] > 0x7e {
			return "", false, nil
		}
	}
	salt := make([]byte, 16)
	if _, err := rand.Read(salt); err != nil {
		return "", false, err
	}
	v, err = scramFromSalt(password, salt, scramIterations)
	return v, err == nil, err
}

// scramFromSalt computes the verifier of password with salt and iterations.
func scramFromSalt(password string, salt []byte, iterations int) (string, error) {
	salted, err := pbkdf2.Key(sha256.New, password, salt, iterations, sha256.Size)
	if err != nil {
		// Only FIPS 140-3 mode refuses some parameters.
		return "", fmt.Errorf("scram verifier: %w", err)
	}
	clientKey := hmacSHA256(salted, "Client Key")
	storedKey := sha256.Sum256(clientKey)
	serverKey := hmacSHA256(salted, "Server Key")
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Sprintf("SCRAM-SHA-256$%d:%s$%s:%s", iterations, b64(salt), b64(storedKey[:]), b64(serverKey)), nil
}

func hmacSHA256(key []byte, msg string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(msg))
	return h.Sum(nil)
}
