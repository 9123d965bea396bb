package sshtest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sync"
	"testing"
)

// Accounts NonRootUser and SudoUser provide.
const (
	TestUser = "soulstack-test" // no sudo rights
	SudoUser = "soulstack-sudo" // passwordless sudo while a test holds it
)

var users struct {
	sync.Mutex
	done map[string]error
}

// NonRootUser returns an unprivileged account that can log in to servers
// started with Options{User: NonRootUser(t)}. Running as root, it creates
// the account the first time (a system user with /bin/sh, home /, no
// password) and leaves it in place for later runs. It skips the test when
// the account cannot be had: not root, or no useradd.
func NonRootUser(tb testing.TB) string {
	tb.Helper()
	if err := ensureUser(TestUser); err != nil {
		tb.Skipf("sshtest: no unprivileged login user: %v", err)
	}
	return TestUser
}

// NonRootSudoUser returns an unprivileged account allowed to run anything
// with sudo and no password until the test ends: the sudoers rule is
// written to /etc/sudoers.d and removed at cleanup. It skips the test where
// NonRootUser would, or when sudo is not installed.
func NonRootSudoUser(tb testing.TB) string {
	tb.Helper()
	if _, err := exec.LookPath("sudo"); err != nil {
		tb.Skip("sshtest: sudo is not installed")
	}
	if err := ensureUser(SudoUser); err != nil {
		tb.Skipf("sshtest: no unprivileged login user: %v", err)
	}
	rule := filepath.Join("/etc/sudoers.d", SudoUser)
	if err := os.WriteFile(rule, []byte(SudoUser+" ALL=(ALL:ALL) NOPASSWD: ALL\n"), 0o440); err != nil {
		tb.Fatalf("sshtest: write sudoers rule: %v", err)
	}
	tb.Cleanup(func() { os.Remove(rule) })
	return SudoUser
}

func ensureUser(name string) error {
	users.Lock()
	defer users.Unlock()
	if err, ok := users.done[name]; ok {
		return err
	}
	err := createUser(name)
	if users.done == nil {
		users.done = make(map[string]error)
	}
	users.done[name] = err
	return err
}

func createUser(name string) error {
	if _, err := user.Lookup(name); err == nil {
		return nil
	}
	if os.Geteuid() != 0 {
		return errors.New("creating one needs root")
	}
	useradd, err := exec.LookPath("useradd")
	if err != nil {
		return err
	}
	// Password "*" is no password without locking the account: sshd
	// without PAM refuses locked ("!") accounts even for key logins.
	out, err := exec.Command(useradd, "--system", "--no-create-home", "--home-dir", "/",
		"--shell", "/bin/sh", "--password", "*", name).CombinedOutput()
	if err != nil {
		// Another test process may have created it meanwhile.
		if _, lerr := user.Lookup(name); lerr == nil {
			return nil
		}
		return fmt.Errorf("useradd: %v: %s", err, out)
	}
	return nil
}
