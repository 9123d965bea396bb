// Command nubes-fake serves a FAKE of Nubes' deck-api on loopback
// (internal/drivers/nubes/nubesfake), so that the nubes driver can be
// tried without a Nubes account. It is not Nubes: it models what the
// public source of Nubes' Terraform provider shows of the API.
//
//	nubes-fake [-listen 127.0.0.1:8470] [-token-file nubes.token]
//	           [-local-state DIR [-host-ports 8420,8421,4222] [-docker]]
//
// The token is read from -token-file, or made and written there (0600)
// when the file does not exist. With -local-state (root on Linux), every
// VM the fake creates is a real local VM (internal/localcloud) that runs
// the userdata it was given and trusts its key for its user login;
// without it a VM is only an address. -host-ports are the keeper's
// ports on loopback the VMs reach at their gateway (the API, the agent
// listener and the bus, for self-onboarding); -docker lets them run
// Docker (nesting: their root can reach the host). It prints the API's
// URL, then serves until interrupted, and destroys the local VMs it made
// when it stops.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/soulstack/soulstack/internal/drivers/nubes/nubesfake"
	"github.com/soulstack/soulstack/internal/localcloud"
)

func main() {
	localcloud.RunIfChild() // the local VMs re-execute this binary
	listen := flag.String("listen", "127.0.0.1:8470", "the address to serve on (loopback)")
	tokenFile := flag.String("token-file", "nubes.token", "the token's file: read, or made when missing")
	state := flag.String("local-state", "", "back each VM with a local VM kept in this directory (root on Linux)")
	ports := flag.String("host-ports", "", "the keeper's loopback ports the local VMs reach at their gateway (comma-separated)")
	docker := flag.Bool("docker", false, "let the local VMs run Docker (nesting: their root can reach the host)")
	flag.Parse()
	if err := run(*listen, *tokenFile, *state, localcloud.ParsePorts(*ports), *docker); err != nil {
		fmt.Fprintln(os.Stderr, "nubes-fake:", err)
		os.Exit(1)
	}
}

func run(listen, tokenFile, state string, ports []uint16, docker bool) error {
	token, err := readOrMakeToken(tokenFile)
	if err != nil {
		return err
	}
	f, err := nubesfake.Listen(listen, token)
	if err != nil {
		return err
	}
	defer f.Close()
	var local *nubesfake.LocalMachines
	if state != "" {
		local = nubesfake.NewLocalMachines(state, ports, docker)
		f.Machines = local
	}
	// The signals are caught before the URL is printed: whoever waits for
	// the URL may stop the fake at once.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Println(f.URL)
	fmt.Fprintf(os.Stderr, "nubes-fake: a FAKE of Nubes' deck-api at %s (token in %s); Ctrl-C stops it\n", f.URL, tokenFile)
	<-ctx.Done()
	if local != nil {
		cleanup(local)
	}
	return nil
}

// readOrMakeToken reads the token of path, or makes one and writes it.
func readOrMakeToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		if t := strings.TrimSpace(string(b)); t != "" {
			return t, nil
		}
		return "", fmt.Errorf("%s is empty", path)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	raw := make([]byte, 24)
	if _, err := rand.Read(raw); err != nil {
		return "", err
	}
	t := "nubesfake_" + hex.EncodeToString(raw)
	return t, os.WriteFile(path, []byte(t+"\n"), 0o600)
}

// cleanup destroys the local VMs the fake made.
func cleanup(m *nubesfake.LocalMachines) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := m.DestroyAll(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "nubes-fake:", err)
	}
}
