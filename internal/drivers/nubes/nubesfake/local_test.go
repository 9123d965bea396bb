package nubesfake_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"os"
	"strings"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/soulstack/soulstack/driversdk"
	"github.com/soulstack/soulstack/internal/drivers/nubes/deckapi"
	"github.com/soulstack/soulstack/internal/drivers/nubes/nubesfake"
	"github.com/soulstack/soulstack/internal/localcloud"
	sshx "github.com/soulstack/soulstack/internal/transport/ssh"
)

func TestMain(m *testing.M) {
	localcloud.RunIfChild() // the local VMs behind the fake re-execute this binary
	os.Exit(m.Run())
}

// TestLocalMachines: with LocalMachines, a VM the fake creates is a real
// local VM that ran the create's userdata and trusts its key for its user
// login (the test logs in over SSH as that user at the address the
// instance reports), and the delete
// destroys it.
func TestLocalMachines(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("local VMs need root (scripts/test runs as root in CI)")
	}
	state, err := os.MkdirTemp("/var/tmp", "soulstack-nubesfake-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(state) })
	cfg, _ := json.Marshal(map[string]any{"state_dir": state})
	prov := driversdk.Provider{Name: "local", FQDNSuffix: "nubesfake.test", Config: cfg, KeeperID: "nubesfake"}
	local := localcloud.New(localcloud.Options{})
	t.Cleanup(func() {
		vms, _ := local.List(context.Background(), driversdk.ListRequest{Provider: prov})
		var ids []string
		for _, vm := range vms {
			ids = append(ids, vm.ID)
		}
		if len(ids) > 0 {
			_ = local.Destroy(context.Background(), driversdk.DestroyRequest{Provider: prov, VMIDs: ids})
		}
	})
	f := nubesfake.New(token)
	defer f.Close()
	f.Machines = &nubesfake.LocalMachines{Driver: local, Provider: prov, Profile: json.RawMessage(`{"cpus": 1, "memory_mb": 128}`)}

	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	spub, _ := gossh.NewPublicKey(pub)
	block, _ := gossh.MarshalPrivateKey(priv, "")
	c := client(f)
	inst, o := create(t, c, "web-1.nubesfake.test", map[string]string{"vappUid": "v", "vmName": "web-1",
		"cloudInit": "#!/bin/sh\necho booted > /var/tmp/nubesfake-userdata\n", "userLogin": "deploy", "userPublicKey": string(gossh.MarshalAuthorizedKey(spub))})
	if o.Successful == nil || !*o.Successful {
		t.Fatalf("create = %+v", o)
	}
	ctx := context.Background()
	var in deckapi.Instance
	for i := 0; i < 10 && in.ExplainedStatus != "running"; i++ {
		in, _ = c.Instance(ctx, inst)
	}
	addr, _ := in.State.Params[nubesfake.AddressKey].(string)
	if in.ExplainedStatus != "running" || addr == "" {
		t.Fatalf("instance = %+v", in)
	}
	dctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	conn, err := sshx.Dial(dctx, sshx.Target{Address: addr, User: "deploy", PrivateKey: pem.EncodeToMemory(block),
		Retry: sshx.RetryPolicy{Attempts: 20, Interval: 500 * time.Millisecond}}, sshx.Options{})
	if err != nil {
		t.Fatalf("log in to the VM behind the fake at %s: %v", addr, err)
	}
	var out string
	for i := 0; i < 50 && out != "booted"; i++ {
		res, err := conn.Exec(dctx, sshx.Command{Argv: []string{"sh", "-c", "cat /var/tmp/nubesfake-userdata 2>/dev/null"}})
		if err != nil {
			t.Fatal(err)
		}
		if out = strings.TrimSpace(string(res.Stdout)); out != "booted" {
			time.Sleep(200 * time.Millisecond)
		}
	}
	conn.Close()
	if out != "booted" {
		t.Fatalf("the VM's userdata did not run: %q", out)
	}

	op, err := c.StartOperation(ctx, inst, deckapi.OpDelete)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Run(ctx, op); err != nil {
		t.Fatal(err)
	}
	finish(t, c, op)
	if vms, err := local.List(ctx, driversdk.ListRequest{Provider: prov}); err != nil || len(vms) != 0 {
		t.Fatalf("after the delete the local driver still has %+v, %v", vms, err)
	}
}
