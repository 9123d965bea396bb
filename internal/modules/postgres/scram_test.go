package postgres

import (
	"regexp"
	"testing"
)

func TestSCRAMVerifier(t *testing.T) {
	t.Parallel()
	salt := make([]byte, 16)
	for i := range salt {
		salt[i] = byte(i)
	}
	// Computed independently (Python's hashlib.pbkdf2_hmac and hmac).
	const want = "SCRAM-SHA-256$4096:AAECAwQFBgcICQoLDA0ODw==$zHCdol2044/ZyWzPLi7oxApCkamKw9Z+E4U/QApd/5Y=:dd5peBOitVnLNFu7VmwP+HiDaaw4OUCv396eVCWhYiE="
	if got, err := scramFromSalt("pencil", salt, 4096); err != nil || got != want {
		t.Fatalf("scramFromSalt = %q, %v; want %q", got, err, want)
	}
	form := regexp.MustCompile(`^SCRAM-SHA-256\$4096:[A-Za-z0-9+/=]{24}\$[A-Za-z0-9+/=]{44}:[A-Za-z0-9+/=]{44}$`)
	tests := []struct {
		name     string
		password string
		ok       bool
	}{
		{"printable ascii", `p@ss:'w\"rd $x`, true},
		{"non-ascii", "pässword", false},
		{"tab", "a\tb", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v, ok, err := scramVerifier(tt.password)
			if err != nil || ok != tt.ok || (ok && !form.MatchString(v)) || (!ok && v != "") {
				t.Fatalf("scramVerifier = %q, %v, %v; want ok=%v", v, ok, err, tt.ok)
			}
		})
	}
}
