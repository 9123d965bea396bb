package localcloud

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/soulstack/soulstack/driversdk"
)

// TestAddressesAndOwnership: a local VM reports its bridge address as its
// private (and primary) address and has no public one; it carries the
// keeper's tag; another keeper deployment can neither destroy nor resize
// it; a VM recorded before the keeper tag existed counts as the state
// dir's keeper's.
func TestAddressesAndOwnership(t *testing.T) {
	e := newEnv(t, nil)
	e.prov.KeeperID = "kd-mine"
	theirs := e.prov
	theirs.KeeperID = "kd-theirs"
	ctx := context.Background()
	vms := e.create(t, driversdk.CreateRequest{RequestID: "owner-req", RunID: "owner-run", Count: 2})
	vm := vms[0]
	if vm.PublicIP != "" || vm.PrivateIP == "" || vm.PrimaryIP != vm.PrivateIP {
		t.Fatalf("primary %q public %q private %q: want the bridge address as private and primary, no public", vm.PrimaryIP, vm.PublicIP, vm.PrivateIP)
	}
	want := []driversdk.Address{{IP: vm.PrivateIP, Kind: driversdk.AddressPrivate, Network: "eth0"}}
	if !slices.Equal(vm.Addresses, want) {
		t.Fatalf("Addresses = %+v, want %+v", vm.Addresses, want)
	}
	if got := vm.Tags[driversdk.TagKeeper]; got != "kd-mine" {
		t.Fatalf("tag %s = %q, want kd-mine (tags %v)", driversdk.TagKeeper, got, vm.Tags)
	}
	// The address is the VM's own: its eth0 has it.
	if out := e.run(t, vm, "root", "ip -4 -o addr show dev eth0"); !strings.Contains(out, " "+vm.PrivateIP+"/") {
		t.Fatalf("eth0 of %s: %q lacks %s", vm.ID, out, vm.PrivateIP)
	}

	e2 := wantCode(t, e.d.Destroy(ctx, driversdk.DestroyRequest{Provider: theirs, VMIDs: vmIDs(vms)}), driversdk.CodeNotOwned)
	if !strings.Contains(e2.Message, vm.ID) {
		t.Fatalf("message %q does not name %s", e2.Message, vm.ID)
	}
	_, err := e.d.Resize(ctx, driversdk.ResizeRequest{Provider: theirs, VMIDs: []string{vm.ID}, Spec: json.RawMessage(`{"memory_mb": 256}`)})
	wantCode(t, err, driversdk.CodeNotOwned)
	listed, err := e.d.List(ctx, driversdk.ListRequest{Provider: e.prov, Tags: map[string]string{driversdk.TagKeeper: "kd-mine"}})
	if err != nil || len(listed) != 2 {
		t.Fatalf("List after the refused calls = %+v, %v; want both VMs", listed, err)
	}
	e.run(t, vm, "root", "true") // still up

	// A VM recorded before VMs carried the keeper tag.
	st := store{dir: e.dir}
	unlock, err := lockState(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	old, err := st.loadVM(vms[1].ID)
	if err == nil {
		delete(old.Tags, driversdk.TagKeeper)
		err = st.saveVM(old)
	}
	unlock()
	if err != nil {
		t.Fatal(err)
	}
	if err := e.d.Destroy(ctx, driversdk.DestroyRequest{Provider: theirs, VMIDs: []string{vms[1].ID}}); err != nil {
		t.Fatalf("Destroy of a VM made before the keeper tag: %v", err)
	}
	if err := e.d.Destroy(ctx, driversdk.DestroyRequest{Provider: e.prov, VMIDs: []string{vm.ID}}); err != nil {
		t.Fatalf("Destroy by its own keeper: %v", err)
	}
}
