package hcloud_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"github.com/soulstack/soulstack/driversdk"
	"github.com/soulstack/soulstack/internal/drivers/hcloud"
	"github.com/soulstack/soulstack/internal/drivers/hcloud/hcloudfake"
)

// TestInProcess calls the driver directly (the SDK against the fake over
// HTTP, without the plugin wire) to check what the wire does not carry
// yet: the keeper's id as a label and ownership check, and the public
// and private addresses.
func TestInProcess(t *testing.T) {
	t.Parallel()
	f := hcloudfake.New(canary)
	t.Cleanup(f.Close)
	d := &hcloud.Driver{Log: slog.New(slog.DiscardHandler)}
	prov := provider(f)
	ctx := context.Background()
	vms, err := d.Create(ctx, driversdk.CreateRequest{Provider: prov, RequestID: "req-inproc", RunID: "run-1", Profile: profile, Count: 2})
	if err != nil || len(vms) != 2 {
		t.Fatalf("Create: %v, %v", vms, err)
	}
	for i, vm := range vms {
		s := f.Servers()[i]
		if s.Labels[driversdk.TagKeeper] != keeperID || vm.Tags[driversdk.TagKeeper] != keeperID {
			t.Errorf("server %d labels %v, VM tags %v: want %s=%s", s.ID, s.Labels, vm.Tags, driversdk.TagKeeper, keeperID)
		}
		if vm.PublicIP != fmt.Sprintf("203.0.113.%d", s.ID%250) || vm.PrimaryIP != vm.PublicIP || vm.PrivateIP != fmt.Sprintf("10.0.1.%d", s.ID%250) {
			t.Errorf("VM %d: primary %q public %q private %q", i, vm.PrimaryIP, vm.PublicIP, vm.PrivateIP)
		}
		want := []driversdk.Address{
			{IP: vm.PublicIP, Kind: driversdk.AddressPublic, Network: "ipv4"},
			{IP: fmt.Sprintf("2001:db8:%x::1", s.ID), Kind: driversdk.AddressPublic, Network: "ipv6"},
			{IP: vm.PrivateIP, Kind: driversdk.AddressPrivate, Network: "11"},
		}
		if fmt.Sprint(vm.Addresses) != fmt.Sprint(want) {
			t.Errorf("VM %d addresses %+v, want %+v", i, vm.Addresses, want)
		}
		if vm.FQDN != fmt.Sprintf("%s.hc.test", s.Name) {
			t.Errorf("VM %d FQDN %q for server %q", i, vm.FQDN, s.Name)
		}
	}

	// Another keeper sharing the project neither sees nor destroys them.
	other := prov
	other.KeeperID = "keeper-other"
	if listed, err := d.List(ctx, driversdk.ListRequest{Provider: other}); err != nil || len(listed) != 0 {
		t.Fatalf("List by another keeper: %+v, %v", listed, err)
	}
	err = d.Destroy(ctx, driversdk.DestroyRequest{Provider: other, VMIDs: []string{vms[0].ID}})
	if code(t, err) != driversdk.CodeNotOwned {
		t.Fatalf("Destroy by another keeper: %v, want %s", err, driversdk.CodeNotOwned)
	}
	if f.Deletes() != 0 {
		t.Fatal("another keeper's Destroy deleted a server")
	}
	// A create by another keeper that meets these servers' names does not
	// adopt them.
	_, err = d.Create(ctx, driversdk.CreateRequest{Provider: other, RequestID: "req-inproc", RunID: "run-1", Profile: profile, Count: 1})
	if code(t, err) != hcloud.CodeNameTaken {
		t.Fatalf("Create by another keeper over the same names: %v, want %s", err, hcloud.CodeNameTaken)
	}
	if f.Creates() != 2 || len(f.Servers()) != 2 {
		t.Fatalf("%d creates, %d servers", f.Creates(), len(f.Servers()))
	}
	if err := d.Destroy(ctx, driversdk.DestroyRequest{Provider: prov, VMIDs: []string{vms[0].ID, vms[1].ID}}); err != nil {
		t.Fatalf("Destroy by the owner: %v", err)
	}
	if len(f.Servers()) != 0 {
		t.Fatalf("servers left: %+v", f.Servers())
	}
}
