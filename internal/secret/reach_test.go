package secret_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/soulstack/soulstack/internal/secret"
)

// TestReach: what a project's provider or soul may resolve. A file only
// under an allowed directory, never in the keeper's own (named relative
// to the working directory, or reached through a symlink), nor /proc; a
// variable only by an allowed name or prefix, never one the keeper's
// configuration names; a Vault path only under the project's prefix;
// credential: always (it resolves in the project's own registry).
func TestReach(t *testing.T) {
	root := t.TempDir()
	t.Chdir(root)
	allowed := filepath.Join(root, "creds")
	keeper := filepath.Join(root, ".keeper")
	for _, d := range []string{allowed, keeper} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p string) string {
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ok := write(filepath.Join(allowed, "cloud.json"))
	token := write(filepath.Join(keeper, "admin.token"))
	outside := write(filepath.Join(root, "outside"))
	keyFile := write(filepath.Join(allowed, "data.key"))
	link := filepath.Join(allowed, "link")
	if err := os.Symlink(token, link); err != nil {
		t.Fatal(err)
	}
	rc := secret.Reach{Files: []string{allowed, "/"}, Env: []string{"HCLOUD_*", "AWS_KEY"}, Keeper: []string{".keeper"},
		KeeperRefs:  []string{"file:" + keyFile, "env:SOULSTACK_DATA_KEY"},
		VaultPrefix: func(p string) string { return "secret/data/soulstack/" + p + "/" }}
	rc.Files = rc.Files[:1] // "/" is tried below on its own
	for ref, want := range map[string]error{
		"file:" + ok:                             nil,
		"file:" + token:                          secret.ErrOutOfReach,
		"file:" + link:                           secret.ErrOutOfReach,
		"file:" + outside:                        secret.ErrOutOfReach,
		"file:" + keyFile:                        secret.ErrOutOfReach,
		"file:" + filepath.Join(allowed, "none"): secret.ErrUnresolved,
		"env:HCLOUD_TOKEN":                       nil,
		"env:AWS_KEY":                            nil,
		"env:AWS_KEYS":                           secret.ErrOutOfReach,
		"env:SOULSTACK_DATA_KEY":                 secret.ErrOutOfReach,
		"vault:secret/data/soulstack/a/x#k":      nil,
		"vault:secret/data/soulstack/b/x#k":      secret.ErrOutOfReach,
		"vault:secret/data/soulstack/a/../b/x#k": secret.ErrOutOfReach,
		"credential:anything":                    nil,
	} {
		r, err := secret.ParseRef(ref)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rc.Check("a", r); !errors.Is(err, want) && !(want == nil && err == nil) {
			t.Errorf("Check(%s) = %v, want %v", ref, err, want)
		}
	}
	// Allowing the whole machine still leaves the keeper's own, and /proc.
	rc.Files = []string{"/"}
	for _, p := range []string{token, "/proc/self/environ"} {
		if _, err := rc.Check("a", secret.Ref{Scheme: "file", Name: p}); !errors.Is(err, secret.ErrOutOfReach) {
			t.Errorf("with files [/], Check(file:%s) = %v, want ErrOutOfReach", p, err)
		}
	}
	if p, err := rc.Check("a", secret.Ref{Scheme: "file", Name: ok}); err != nil || p != ok {
		t.Errorf("with files [/], Check(file:%s) = %q, %v", ok, p, err)
	}
}
