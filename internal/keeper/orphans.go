package keeper

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/driversdk"
	"github.com/soulstack/soulstack/internal/api"
	"github.com/soulstack/soulstack/internal/modules/cloud"
	"github.com/soulstack/soulstack/internal/store"
)

// orphanRegistry is what the orphan finder reads and writes of the
// registry.
type orphanRegistry interface {
	ProviderGet(ctx context.Context, name string) (store.Provider, error)
	ProviderList(ctx context.Context, p store.ListParams) ([]store.Provider, error)
	SoulsOfProvider(ctx context.Context, provider string) ([]store.Soul, error)
	CloudRequestGet(ctx context.Context, requestID string) (store.CloudRequest, error)
	AuditRecord(ctx context.Context, p store.AuditParams) error
}

// cloudService finds VMs a driver has, made by a keeper, that no live soul
// row owns: what a crash in the middle of core.cloud.created leaves. Its
// errors are the api package's (api.DriverError, api.ErrNotListable,
// api.ErrNotOrphan) and the store's.
type cloudService struct {
	st       orphanRegistry
	keeperID string // passed to drivers as Provider.KeeperID
	drivers  func(ctx context.Context, name string) (driversdk.Driver, error)
	// credentials checks a provider may be used as configured and
	// resolves its credentials in its own project (projectSecrets.Provider).
	credentials func(ctx context.Context, p store.Provider) ([]byte, error)
}

// providers returns provider name, or every provider when name is
// empty: of project alone when project is set (a share lets a project use
// a provider, never answer for its VMs).
func (c *cloudService) providers(ctx context.Context, name, project string) ([]store.Provider, error) {
	if name != "" {
		p, err := c.st.ProviderGet(ctx, name)
		if err != nil {
			return nil, err
		}
		return []store.Provider{p}, nil
	}
	var all []store.Provider
	after := ""
	for {
		page, err := c.st.ProviderList(ctx, store.ListParams{Limit: 500, After: after, Project: project})
		if err != nil {
			return nil, err
		}
		for _, p := range page {
			if project == "" || p.Project == project {
				all = append(all, p)
			}
		}
		if len(page) < 500 {
			return all, nil
		}
		after = page[len(page)-1].Name
	}
}

// orphansOf lists one provider's orphans; listable reports whether the
// driver can list at all.
func (c *cloudService) orphansOf(ctx context.Context, p store.Provider) (orphans []client.Orphan, d driversdk.Driver, dp driversdk.Provider, listable bool, err error) {
	d, err = c.drivers(ctx, p.Driver)
	if err != nil {
		return nil, nil, dp, false, &api.DriverError{Provider: p.Name, Err: err}
	}
	caps, err := d.Capabilities(ctx)
	if err != nil {
		return nil, nil, dp, false, &api.DriverError{Provider: p.Name, Err: err}
	}
	if !caps.Listable {
		return nil, d, dp, false, nil
	}
	dp = driversdk.Provider{Name: p.Name, Region: p.Region, FQDNSuffix: p.FQDNSuffix, Config: cloud.DriverConfig(p.Config), KeeperID: c.keeperID}
	if dp.Credentials, err = c.credentials(ctx, p); err != nil {
		return nil, nil, dp, true, &api.DriverError{Provider: p.Name, Ref: p.CredentialsRef, Err: err}
	}
	vms, err := d.List(ctx, driversdk.ListRequest{Provider: dp})
	if err != nil {
		return nil, nil, dp, true, &api.DriverError{Provider: p.Name, Err: err}
	}
	souls, err := c.st.SoulsOfProvider(ctx, p.Name)
	if err != nil {
		return nil, nil, dp, true, err
	}
	owned := map[string]bool{}
	for _, so := range souls {
		if so.Status != store.SoulDestroyed {
			owned[so.VMID] = true
		}
	}
	for _, vm := range vms {
		reqID := vm.Tags[driversdk.TagRequestID]
		if reqID == "" || owned[vm.ID] {
			continue
		}
		// Another keeper deployment's VM (same account, other database)
		// is not ours to report or destroy. A VM without the tag predates
		// it (protocol 1) and is still listed.
		if k, tagged := vm.Tags[driversdk.TagKeeper]; tagged && k != c.keeperID {
			continue
		}
		o := client.Orphan{Provider: p.Name, VMID: vm.ID, FQDN: vm.FQDN, PrimaryIP: vm.PrimaryIP, RequestID: reqID, RunID: vm.Tags[driversdk.TagRunID]}
		if req, err := c.st.CloudRequestGet(ctx, reqID); err == nil {
			o.RunID, o.Step = req.RunID, req.Step
		}
		orphans = append(orphans, o)
	}
	return orphans, d, dp, true, nil
}

// Orphans lists orphaned VMs.
func (c *cloudService) Orphans(ctx context.Context, provider string) ([]client.Orphan, error) {
	ps, err := c.providers(ctx, provider, "")
	if err != nil {
		return nil, err
	}
	out := []client.Orphan{}
	for _, p := range ps {
		found, _, _, listable, err := c.orphansOf(ctx, p)
		if err != nil {
			return nil, err
		}
		if !listable && provider != "" {
			return nil, fmt.Errorf("driver %q of provider %q: %w", p.Driver, p.Name, api.ErrNotListable)
		}
		out = append(out, found...)
	}
	return out, nil
}

// DestroyOrphans destroys VMs that are still orphans, with an audit event.
func (c *cloudService) DestroyOrphans(ctx context.Context, provider string, vmIDs []string, actor store.Actor) ([]client.Orphan, error) {
	ps, err := c.providers(ctx, provider, "")
	if err != nil {
		return nil, err
	}
	orphans, d, dp, listable, err := c.orphansOf(ctx, ps[0])
	if err != nil {
		return nil, err
	}
	if !listable {
		return nil, fmt.Errorf("provider %q: %w", provider, api.ErrNotListable)
	}
	byID := map[string]client.Orphan{}
	for _, o := range orphans {
		byID[o.VMID] = o
	}
	var doomed []client.Orphan
	for _, id := range vmIDs {
		o, ok := byID[id]
		if !ok {
			return nil, fmt.Errorf("VM %q of provider %q is %w (a soul owns it, or the driver does not know it); nothing was destroyed", id, provider, api.ErrNotOrphan)
		}
		doomed = append(doomed, o)
	}
	if err := d.Destroy(ctx, driversdk.DestroyRequest{Provider: dp, VMIDs: vmIDs}); err != nil {
		return nil, &api.DriverError{Provider: provider, Err: err}
	}
	if err := c.st.AuditRecord(ctx, store.AuditParams{Actor: actor, Action: "cloud.orphans_destroyed", Object: "provider/" + provider,
		Payload: map[string]any{"provider": provider, "vm_ids": vmIDs}}); err != nil {
		return nil, fmt.Errorf("the orphans were destroyed but the audit event failed: %w", err)
	}
	return doomed, nil
}

// sizeKeys are the VM attributes that say a VM's size, across drivers.
var sizeKeys = []string{"cpus", "memory_mb", "memory_gb", "server_type", "instance_type", "flavor"}

// CloudDrift lists, per provider, the live souls whose VM is gone,
// stopped or resized, and the orphans. With project set it answers of
// that project's providers and souls alone: a soul another project made
// on a provider shared with it is that project's, and neither listed nor
// (being owned) an orphan.
func (c *cloudService) CloudDrift(ctx context.Context, provider, project string) ([]client.CloudDrift, error) {
	ps, err := c.providers(ctx, provider, project)
	if err != nil {
		return nil, err
	}
	out := []client.CloudDrift{}
	for _, p := range ps {
		cd := client.CloudDrift{Provider: p.Name, Missing: []client.CloudVM{}, Stopped: []client.CloudVM{}, Resized: []client.CloudVM{}, Orphans: []client.Orphan{}}
		orphans, d, dp, listable, err := c.orphansOf(ctx, p)
		if err != nil {
			return nil, err
		}
		cd.Listable = listable
		if !listable {
			out = append(out, cd)
			continue
		}
		cd.Orphans = append(cd.Orphans, orphans...)
		vms, err := d.List(ctx, driversdk.ListRequest{Provider: dp})
		if err != nil {
			return nil, &api.DriverError{Provider: p.Name, Err: err}
		}
		byID := map[string]driversdk.VM{}
		for _, vm := range vms {
			byID[vm.ID] = vm
		}
		souls, err := c.st.SoulsOfProvider(ctx, p.Name)
		if err != nil {
			return nil, err
		}
		for _, so := range souls {
			if so.Status == store.SoulDestroyed || so.VMID == "" || project != "" && so.Project != project {
				continue
			}
			vm, ok := byID[so.VMID]
			if !ok {
				cd.Missing = append(cd.Missing, client.CloudVM{SID: so.SID, VMID: so.VMID})
				continue
			}
			if st, _ := vm.Attributes["state"].(string); st != "" && st != "running" {
				cd.Stopped = append(cd.Stopped, client.CloudVM{SID: so.SID, VMID: so.VMID, State: st})
			}
			var registered map[string]any
			_ = json.Unmarshal(so.Attributes, &registered)
			for _, k := range sizeKeys {
				was, had := registered[k]
				now, has := vm.Attributes[k]
				if had && has && fmt.Sprint(was) != fmt.Sprint(now) {
					cd.Resized = append(cd.Resized, client.CloudVM{SID: so.SID, VMID: so.VMID, Key: k, Registered: fmt.Sprint(was), Now: fmt.Sprint(now)})
				}
			}
		}
		out = append(out, cd)
	}
	return out, nil
}
