package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/drivers/nubes/deckapi"
)

// TestServes: the command makes a token file (0600), prints the API's URL,
// answers the deck-api with that token (and 401 without it), and stops on
// SIGTERM.
func TestServes(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "nubes-fake")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	tokenFile := filepath.Join(dir, "nubes.token")
	cmd := exec.Command(bin, "-listen", "127.0.0.1:0", "-token-file", tokenFile)
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }) // the process this test started
	url, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	url = strings.TrimSpace(url)
	fi, err := os.Stat(tokenFile)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v, %v", fi, err)
	}
	raw, _ := os.ReadFile(tokenFile)
	token := strings.TrimSpace(string(raw))
	c := &deckapi.Client{BaseURL: url, Token: func(context.Context) (string, error) { return token, nil }, Attempts: 1}
	if _, err := c.CreateInstance(context.Background(), deckapi.ServiceVM, "web-1", "d"); err != nil {
		t.Fatalf("create an instance at %s: %v", url, err)
	}
	if refs, err := c.Instances(context.Background(), 1, 10); err != nil || len(refs) != 1 || refs[0].DisplayName != "web-1" {
		t.Fatalf("instances = %+v, %v", refs, err)
	}
	c.Token = func(context.Context) (string, error) { return "wrong", nil }
	if _, err := c.Instances(context.Background(), 1, 10); err == nil {
		t.Fatal("another token was accepted")
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("it did not stop on SIGTERM")
	}
}
