// Command nubes-fake serves a FAKE of Nubes' deck-api on loopback
// (internal/drivers/nubes/nubesfake), so that the nubes driver can be
// tried without a Nubes account. It is not Nubes: it models what the
// public source of Nubes' Terraform provider shows of the API.
//
//	nubes-fake [-listen 127.0.0.1:8470] [-token-file nubes.token] [-local-state DIR]
//
// The token is read from -token-file, or made and written there (0600)
// when the file does not exist. With -local-state (root on Linux), every
// VM the fake creates is a real local VM (internal/localcloud) that runs
// the userdata it was given and trusts its key; without it a VM is only
// an address. It prints the API's URL, then serves until interrupted, and
// destroys the local VMs it made when it stops.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/soulstack/soulstack/driversdk"
	"github.com/soulstack/soulstack/internal/drivers/nubes/nubesfake"
	"github.com/soulstack/soulstack/internal/localcloud"
)

func main() {
	localcloud.RunIfChild() // the local VMs re-execute this binary
	listen := flag.String("listen", "127.0.0.1:8470", "the address to serve on (loopback)")
	tokenFile := flag.String("token-file", "nubes.token", "the token's file: read, or made when missing")
	state := flag.String("local-state", "", "back each VM with a local VM kept in this directory (root on Linux)")
	flag.Parse()
	if err := run(*listen, *tokenFile, *state); err != nil {
		fmt.Fprintln(os.Stderr, "nubes-fake:", err)
		os.Exit(1)
	}
}

func run(listen, tokenFile, state string) error {
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
		cfg, _ := json.Marshal(map[string]any{"state_dir": state})
		local = &nubesfake.LocalMachines{Driver: localcloud.New(localcloud.Options{}),
			Provider: driversdk.Provider{Name: "nubes-fake", FQDNSuffix: "nubes.test", Config: cfg, KeeperID: "nubes-fake"},
			Profile:  json.RawMessage(`{"cpus": 1, "memory_mb": 512, "ssh_user": "root"}`)}
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
	vms, err := m.Driver.List(ctx, driversdk.ListRequest{Provider: m.Provider})
	if err != nil {
		fmt.Fprintln(os.Stderr, "nubes-fake: list the local VMs:", err)
		return
	}
	var ids []string
	for _, vm := range vms {
		ids = append(ids, vm.ID)
	}
	if len(ids) > 0 {
		if err := m.Driver.Destroy(ctx, driversdk.DestroyRequest{Provider: m.Provider, VMIDs: ids}); err != nil {
			fmt.Fprintln(os.Stderr, "nubes-fake: destroy the local VMs:", err)
		}
	}
}
