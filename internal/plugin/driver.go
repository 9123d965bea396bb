package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/soulstack/soulstack/driversdk"
	"github.com/soulstack/soulstack/internal/logctx"
	pb "github.com/soulstack/soulstack/internal/plugin/proto/clouddriverv1"
	"github.com/soulstack/soulstack/internal/plugin/wire"
)

// driver is the keeper side of the gRPC adapter: a driversdk.Driver whose
// methods call the driver's current plugin process.
type driver struct {
	h    *Host
	name string
}

var _ driversdk.Driver = (*driver)(nil)

// do runs one call on the driver's process, under a deadline: the earlier of
// the caller's and now+timeout. The driver is told that deadline; the call
// itself waits KillGrace longer before the process is taken for hung.
// Cancelling ctx cancels the call at once.
func (d *driver) do(ctx context.Context, method string, timeout time.Duration, fn func(ctx context.Context, p *proc) error) (err error) {
	defer func(start time.Time) { d.h.metrics.observe(d.name, method, time.Since(start), err) }(time.Now())
	p, err := d.h.acquire(ctx, d.name)
	if err != nil {
		return err
	}
	start := time.Now()
	deadline := start.Add(timeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	c := call{driver: d.name, method: method, parent: ctx, deadline: deadline, budget: deadline.Sub(start)}
	if c.budget <= 0 {
		return &driversdk.Error{Code: driversdk.CodeDriverTimeout, Message: fmt.Sprintf("driver %q: %s: the deadline passed before the call", d.name, method)}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("driver %q: %s: %w", d.name, method, err)
	}

	rpcCtx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline.Add(d.h.cfg.KillGrace))
	defer cancel()
	stop := context.AfterFunc(ctx, func() {
		if errors.Is(ctx.Err(), context.Canceled) {
			cancel()
		}
	})
	defer stop()
	rpcCtx = metadata.AppendToOutgoingContext(rpcCtx, wire.DeadlineKey, strconv.FormatInt(deadline.UnixNano(), 10))
	if run := logctx.Run(ctx); run != "" {
		rpcCtx = metadata.AppendToOutgoingContext(rpcCtx, wire.RunKey, run)
	}

	if err := fn(rpcCtx, p); err != nil {
		return callError(p, c, err)
	}
	return nil
}

// Capabilities asks the driver what it supports.
func (d *driver) Capabilities(ctx context.Context) (driversdk.Capabilities, error) {
	var out driversdk.Capabilities
	err := d.do(ctx, "Capabilities", d.h.cfg.CallTimeout, func(ctx context.Context, p *proc) error {
		r, err := p.rpc.Capabilities(ctx, &pb.CapabilitiesRequest{})
		if err != nil {
			return err
		}
		out = capsFromWire(r)
		p.setCapabilities(out)
		return nil
	})
	return out, err
}

// ValidateProfile asks the driver to check a profile spec.
func (d *driver) ValidateProfile(ctx context.Context, prov driversdk.Provider, profile json.RawMessage) error {
	return d.do(ctx, "ValidateProfile", d.h.cfg.CallTimeout, func(ctx context.Context, p *proc) error {
		_, err := p.rpc.ValidateProfile(ctx, &pb.ValidateProfileRequest{Provider: providerToWire(prov), ProfileJson: profile})
		return err
	})
}

// Create asks the driver for VMs.
func (d *driver) Create(ctx context.Context, req driversdk.CreateRequest) ([]driversdk.VM, error) {
	var out []driversdk.VM
	err := d.do(ctx, "Create", d.h.cfg.CreateTimeout, func(ctx context.Context, p *proc) error {
		r, err := p.rpc.Create(ctx, &pb.CreateRequest{
			Provider:       providerToWire(req.Provider),
			RequestId:      req.RequestID,
			RunId:          req.RunID,
			ProfileJson:    req.Profile,
			Count:          int64(req.Count),
			Names:          req.Names,
			Userdata:       req.Userdata,
			AuthorizedKeys: req.AuthorizedKeys,
		})
		if err != nil {
			return err
		}
		out, err = vmsFromWire(d.name, r.GetVms())
		return err
	})
	return out, err
}

// Destroy asks the driver to destroy VMs.
func (d *driver) Destroy(ctx context.Context, req driversdk.DestroyRequest) error {
	return d.do(ctx, "Destroy", d.h.cfg.DestroyTimeout, func(ctx context.Context, p *proc) error {
		_, err := p.rpc.Destroy(ctx, &pb.DestroyRequest{Provider: providerToWire(req.Provider), VmIds: req.VMIDs})
		return err
	})
}

// Resize asks the driver to resize VMs; a driver that is not Resizable is
// not called and the error has code resize.unsupported.
func (d *driver) Resize(ctx context.Context, req driversdk.ResizeRequest) ([]driversdk.ResizeResult, error) {
	var out []driversdk.ResizeResult
	err := d.do(ctx, "Resize", d.h.cfg.ResizeTimeout, func(ctx context.Context, p *proc) error {
		c, err := p.capabilities(ctx)
		if err != nil {
			return err
		}
		if !c.Resizable {
			return &driversdk.Error{Code: driversdk.CodeResizeUnsupported, Message: fmt.Sprintf("driver %q cannot resize VMs", d.name)}
		}
		r, err := p.rpc.Resize(ctx, &pb.ResizeRequest{Provider: providerToWire(req.Provider), VmIds: req.VMIDs, SpecJson: req.Spec})
		if err != nil {
			return err
		}
		out = make([]driversdk.ResizeResult, len(r.GetResults()))
		for i, res := range r.GetResults() {
			out[i] = driversdk.ResizeResult{VMID: res.GetVmId(), CausedDowntime: res.GetCausedDowntime(), Unchanged: res.GetUnchanged()}
		}
		return nil
	})
	return out, err
}

// List asks the driver for its VMs carrying req.Tags; a driver that is not
// Listable is not called and the error has code list.unsupported.
func (d *driver) List(ctx context.Context, req driversdk.ListRequest) ([]driversdk.VM, error) {
	var out []driversdk.VM
	err := d.do(ctx, "List", d.h.cfg.CallTimeout, func(ctx context.Context, p *proc) error {
		c, err := p.capabilities(ctx)
		if err != nil {
			return err
		}
		if !c.Listable {
			return &driversdk.Error{Code: driversdk.CodeListUnsupported, Message: fmt.Sprintf("driver %q cannot list VMs", d.name)}
		}
		r, err := p.rpc.List(ctx, &pb.ListRequest{Provider: providerToWire(req.Provider), Tags: req.Tags})
		if err != nil {
			return err
		}
		out, err = vmsFromWire(d.name, r.GetVms())
		return err
	})
	return out, err
}

func capsFromWire(r *pb.CapabilitiesResponse) driversdk.Capabilities {
	return driversdk.Capabilities{
		Resizable:         r.GetResizable(),
		IdempotencyTokens: r.GetIdempotencyTokens(),
		Listable:          r.GetListable(),
	}
}

func providerToWire(p driversdk.Provider) *pb.Provider {
	return &pb.Provider{
		Name:        p.Name,
		Region:      p.Region,
		FqdnSuffix:  p.FQDNSuffix,
		ConfigJson:  p.Config,
		Credentials: p.Credentials,
		KeeperId:    p.KeeperID,
	}
}

func vmsFromWire(driver string, vms []*pb.VM) ([]driversdk.VM, error) {
	out := make([]driversdk.VM, len(vms))
	for i, vm := range vms {
		v := driversdk.VM{
			ID: vm.GetId(), FQDN: vm.GetFqdn(), PrimaryIP: vm.GetPrimaryIp(),
			PublicIP: vm.GetPublicIp(), PrivateIP: vm.GetPrivateIp(), Tags: vm.GetTags(),
		}
		for _, a := range vm.GetAddresses() {
			v.Addresses = append(v.Addresses, driversdk.Address{IP: a.GetIp(), Kind: a.GetKind(), Network: a.GetNetwork()})
		}
		if b := vm.GetAttributesJson(); len(b) > 0 {
			if err := json.Unmarshal(b, &v.Attributes); err != nil {
				return nil, &driversdk.Error{
					Code:    driversdk.CodeDriverFailed,
					Message: fmt.Sprintf("driver %q: VM %s: attributes are not a JSON object: %v", driver, vm.GetId(), err),
				}
			}
		}
		out[i] = v
	}
	return out, nil
}
