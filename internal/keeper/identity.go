package keeper

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	gossh "golang.org/x/crypto/ssh"
)

// loadOrCreateID returns this keeper's stable id, kept in <data-dir>/keeper.id.
// It names the keeper as a run's executor, so that after a crash the
// restarted keeper knows which runs were its own.
func loadOrCreateID(dataDir string) (string, error) {
	path := filepath.Join(dataDir, "keeper.id")
	b, err := os.ReadFile(path)
	if err == nil {
		id := strings.TrimSpace(string(b))
		if id == "" {
			return "", fmt.Errorf("%s is empty; delete it to get a new keeper id", path)
		}
		return id, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("read keeper id: %w", err)
	}
	raw := make([]byte, 8)
	if _, err := rand.Read(raw); err != nil {
		return "", err
	}
	host, _ := os.Hostname()
	id := "keeper-" + sanitize(host) + "-" + hex.EncodeToString(raw)
	if err := os.WriteFile(path, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write keeper id: %w", err)
	}
	return id, nil
}

func sanitize(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '-' {
			b.WriteRune(r)
		}
	}
	if b.Len() == 0 {
		return "host"
	}
	return b.String()
}

// loadOrCreateSSHKey returns the keeper's own SSH private key (OpenSSH
// PEM), generated into <data-dir>/ssh/id_ed25519 (0600) on first use, with
// its public key beside it. Souls registered without a key_ref, and the
// VMs cloud drivers create, are reached with it.
func loadOrCreateSSHKey(dataDir string) ([]byte, error) {
	dir := filepath.Join(dataDir, "ssh")
	path := filepath.Join(dir, "id_ed25519")
	if b, err := os.ReadFile(path); err == nil {
		return b, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read keeper ssh key: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	block, err := gossh.MarshalPrivateKey(priv, "soulstack keeper")
	if err != nil {
		return nil, err
	}
	pemBytes := pem.EncodeToMemory(block)
	sshPub, err := gossh.NewPublicKey(pub)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, pemBytes, 0o600); err != nil {
		return nil, fmt.Errorf("write keeper ssh key: %w", err)
	}
	authorized := strings.TrimSpace(string(gossh.MarshalAuthorizedKey(sshPub))) + " soulstack-keeper\n"
	if err := os.WriteFile(path+".pub", []byte(authorized), 0o644); err != nil {
		return nil, fmt.Errorf("write keeper ssh public key: %w", err)
	}
	return pemBytes, nil
}
