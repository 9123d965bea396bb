package keeper_test

import (
	"context"
	"errors"

	"github.com/soulstack/soulstack/driversdk"
)

// destroyDriverVMs destroys every VM the driver lists for p, each as the
// keeper deployment its soulstack.keeper tag names: drivers refuse to
// destroy another deployment's VMs, and a test's cleanup must leave none.
func destroyDriverVMs(ctx context.Context, d driversdk.Driver, p driversdk.Provider) error {
	vms, err := d.List(ctx, driversdk.ListRequest{Provider: p})
	if err != nil {
		return err
	}
	byKeeper := map[string][]string{}
	for _, vm := range vms {
		k := vm.Tags[driversdk.TagKeeper]
		byKeeper[k] = append(byKeeper[k], vm.ID)
	}
	var errs []error
	for keeper, ids := range byKeeper {
		q := p
		q.KeeperID = keeper
		errs = append(errs, d.Destroy(ctx, driversdk.DestroyRequest{Provider: q, VMIDs: ids}))
	}
	return errors.Join(errs...)
}
