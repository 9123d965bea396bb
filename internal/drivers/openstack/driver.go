package openstack

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/flavors"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/instanceactions"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/keypairs"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/floatingips"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"
	"github.com/soulstack/soulstack/driversdk"
)

// The server metadata keys the driver sets: the driversdk tags in the
// spelling OpenStack users know (a colon, as the issue and EC2 write
// them), the VM's index within its request and nothing else.
const (
	metaPrefix    = "soulstack:"
	metaRequestID = "soulstack:request_id"
	metaRunID     = "soulstack:run_id"
	metaKeeper    = "soulstack:keeper"
	metaIndex     = "soulstack:index"
)

// sdkTag maps a driversdk tag key to its metadata key.
var sdkTag = map[string]string{
	driversdk.TagRequestID: metaRequestID,
	driversdk.TagRunID:     metaRunID,
	driversdk.TagKeeper:    metaKeeper,
}

// Driver is the OpenStack CloudDriver. It keeps no state between calls:
// every call authenticates with the credentials it carries, and what it
// made is found again by the servers' metadata.
type Driver struct {
	// Poll is the first interval between looks at a server that is not
	// ready yet; it doubles up to 2 s. Zero means 200 ms.
	Poll time.Duration
}

var _ driversdk.Driver = (*Driver)(nil)

// New returns the driver.
func New() *Driver { return &Driver{} }

// Capabilities: resizable (Nova resize + confirm), idempotent by the
// request id in the servers' metadata, listable by metadata.
func (d *Driver) Capabilities(context.Context) (driversdk.Capabilities, error) {
	return driversdk.Capabilities{Resizable: true, IdempotencyTokens: true, Listable: true}, nil
}

// ValidateProfile checks the provider's config and the profile strictly;
// it makes no call to the cloud.
func (d *Driver) ValidateProfile(_ context.Context, p driversdk.Provider, profile json.RawMessage) error {
	if _, err := parseConfig(p.Config); err != nil {
		return err
	}
	_, err := parseProfile(profile)
	return err
}

// Create makes req.Count servers, or returns those a previous Create
// with the same request id made. On a definite failure (quota, a server
// in ERROR, a refused request) it deletes every server of the request
// before it answers, so that nothing billed is left that the keeper does
// not know; when the deadline passes it leaves them, tagged, for a retry
// with the same request id or for orphan reconciliation.
func (d *Driver) Create(ctx context.Context, req driversdk.CreateRequest) ([]driversdk.VM, error) {
	prof, err := parseProfile(req.Profile)
	if err != nil {
		return nil, err
	}
	if req.Count < 1 || req.RequestID == "" {
		return nil, driversdk.InvalidProfile("count", "a create needs a count of at least 1 and a request id")
	}
	c, err := connect(ctx, req.Provider)
	if err != nil {
		return nil, err
	}
	mine, err := c.requestServers(ctx, req.Provider.KeeperID, req.RequestID)
	if err != nil {
		return nil, err
	}
	vms, err := d.create(ctx, c, req, prof, mine)
	if err == nil {
		return vms, nil
	}
	if driversdk.CodeOf(err) == driversdk.CodeDriverTimeout || ctx.Err() != nil {
		return nil, driversdk.Errorf(driversdk.CodeDriverTimeout, "%s; the servers made so far are tagged %s=%s and are returned by a retry of the same request", err.(*driversdk.Error).Message, metaRequestID, req.RequestID)
	}
	return nil, c.rollback(ctx, req, err)
}

func (d *Driver) create(ctx context.Context, c *clients, req driversdk.CreateRequest, prof Profile, mine map[int]servers.Server) ([]driversdk.VM, error) {
	flavorID, err := c.flavorID(ctx, prof.Flavor)
	if err != nil {
		return nil, err
	}
	ids := make([]string, req.Count)
	fresh := map[string]bool{}
	for i := range req.Count {
		if s, ok := mine[i]; ok {
			ids[i] = s.ID
			continue
		}
		id, err := c.createServer(ctx, req, prof, flavorID, i)
		if err != nil {
			return nil, err
		}
		ids[i], fresh[id] = id, true
	}
	vms := make([]driversdk.VM, req.Count)
	for i, id := range ids {
		s, err := d.waitActive(ctx, c, id, fresh[id])
		if err != nil {
			return nil, err
		}
		if prof.FloatingNetwork != "" {
			if s, err = c.floatingIP(ctx, req, prof.FloatingNetwork, s); err != nil {
				return nil, err
			}
		}
		vms[i] = vmOf(s)
	}
	return vms, nil
}

// serverName is VM i's server name: the name the keeper predicted, or
// one derived from the request id.
func serverName(req driversdk.CreateRequest, i int) string {
	if len(req.Names) == req.Count && req.Names[i] != "" {
		return strings.TrimSuffix(req.Names[i], ".")
	}
	sum := sha256.Sum256([]byte(req.RequestID))
	return fmt.Sprintf("soulstack-%s-%d", hex.EncodeToString(sum[:6]), i)
}

func (c *clients) createServer(ctx context.Context, req driversdk.CreateRequest, prof Profile, flavorID string, i int) (string, error) {
	name := serverName(req, i)
	meta := map[string]string{}
	for k, v := range prof.Labels {
		meta[k] = v
	}
	meta[metaRequestID] = req.RequestID
	meta[metaRunID] = req.RunID
	meta[metaKeeper] = req.Provider.KeeperID
	meta[metaIndex] = strconv.Itoa(i)
	opts := servers.CreateOpts{
		Name:             name,
		FlavorRef:        flavorID,
		SecurityGroups:   prof.SecurityGroups,
		AvailabilityZone: prof.Zone,
		Networks:         []servers.Network{{UUID: prof.Network}},
		Metadata:         meta,
	}
	if prof.VolumeSizeGB > 0 {
		opts.BlockDevice = []servers.BlockDevice{{
			SourceType: servers.SourceImage, UUID: prof.Image, DestinationType: servers.DestinationVolume,
			VolumeSize: prof.VolumeSizeGB, DeleteOnTermination: true, BootIndex: 0,
		}}
	} else {
		opts.ImageRef = prof.Image
	}
	var userdata string
	if len(req.Userdata) == req.Count {
		userdata = req.Userdata[i]
	}
	if ud, err := buildUserdata(userdata, req.AuthorizedKeys); err != nil {
		return "", err
	} else if ud != nil {
		opts.UserData = ud
	}
	var b servers.CreateOptsBuilder = opts
	if prof.KeyName != "" {
		b = keypairs.CreateOptsExt{CreateOptsBuilder: opts, KeyName: prof.KeyName}
	}
	s, err := servers.Create(ctx, c.compute, b, nil).Extract()
	if err != nil {
		return "", cloudError(fmt.Sprintf("create server %s", name), err)
	}
	return s.ID, nil
}

// waitActive polls a server until it is ACTIVE with an address. A server
// this call just made may be missing from the first answers (404) while
// the cloud catches up; one in ERROR is a failure.
func (d *Driver) waitActive(ctx context.Context, c *clients, id string, fresh bool) (*servers.Server, error) {
	poll := d.Poll
	if poll == 0 {
		poll = 200 * time.Millisecond
	}
	for missing := 0; ; {
		s, err := servers.Get(ctx, c.compute, id).Extract()
		switch {
		case gophercloud.ResponseCodeIs(err, 404) && fresh && missing < 20:
			missing++
		case err != nil:
			return nil, cloudError("wait for server "+id, err)
		case s.Status == "ERROR":
			msg := "the cloud put it in ERROR"
			if s.Fault.Message != "" {
				msg += ": " + clip(s.Fault.Message)
			}
			if strings.Contains(strings.ToLower(s.Fault.Message), "quota") {
				return nil, driversdk.Errorf(codeQuota, "server %s: %s", id, msg)
			}
			return nil, driversdk.Errorf(codeVMFailed, "server %s: %s", id, msg)
		case s.Status == "ACTIVE" && len(addresses(s)) > 0:
			return s, nil
		}
		t := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, driversdk.Errorf(driversdk.CodeDriverTimeout, "server %s is not ACTIVE with an address yet and the call's deadline passed", id)
		case <-t.C:
		}
		poll = min(2*poll, 2*time.Second)
	}
}

// floatingIP gives a server a floating IP from network, once: a server
// whose port has one already keeps it.
func (c *clients) floatingIP(ctx context.Context, req driversdk.CreateRequest, network string, s *servers.Server) (*servers.Server, error) {
	port, err := c.serverPort(ctx, s.ID)
	if err != nil {
		return nil, err
	}
	pages, err := floatingips.List(c.network, floatingips.ListOpts{PortID: port}).AllPages(ctx)
	if err != nil {
		return nil, cloudError("list floating IPs of server "+s.ID, err)
	}
	fips, err := floatingips.ExtractFloatingIPs(pages)
	if err != nil {
		return nil, cloudError("list floating IPs of server "+s.ID, err)
	}
	if len(fips) == 0 {
		fip, err := floatingips.Create(ctx, c.network, floatingips.CreateOpts{
			FloatingNetworkID: network, PortID: port,
			Description: fipDescription(req.Provider.KeeperID, req.RequestID, req.RunID),
		}).Extract()
		if err != nil {
			return nil, cloudError("create a floating IP for server "+s.ID, err)
		}
		fips = append(fips, *fip)
	}
	addFloating(s, fips[0].FloatingIP)
	return s, nil
}

// fipDescription tags a floating IP (Neutron resources carry a
// description; their tags need a separate call per tag).
func fipDescription(keeper, requestID, runID string) string {
	return fmt.Sprintf("%s=%s %s=%s %s=%s", metaKeeper, keeper, metaRequestID, requestID, metaRunID, runID)
}

func (c *clients) serverPort(ctx context.Context, id string) (string, error) {
	pages, err := ports.List(c.network, ports.ListOpts{DeviceID: id}).AllPages(ctx)
	if err != nil {
		return "", cloudError("list the ports of server "+id, err)
	}
	ps, err := ports.ExtractPorts(pages)
	if err != nil {
		return "", cloudError("list the ports of server "+id, err)
	}
	if len(ps) == 0 {
		return "", driversdk.Errorf(codeVMFailed, "server %s has no port to put a floating IP on", id)
	}
	return ps[0].ID, nil
}

// addFloating records a floating IP in a server's addresses as Nova
// reports it once its cache catches up.
func addFloating(s *servers.Server, ip string) {
	for _, a := range addresses(s) {
		if a.IP == ip {
			return
		}
	}
	for net, v := range s.Addresses {
		list, _ := v.([]any)
		s.Addresses[net] = append(list, map[string]any{"addr": ip, "version": 4.0, "OS-EXT-IPS:type": "floating"})
		return
	}
}

// rollback deletes every server of a failed request and returns cause,
// saying what could not be deleted.
func (c *clients) rollback(ctx context.Context, req driversdk.CreateRequest, cause error) error {
	mine, err := c.requestServers(ctx, req.Provider.KeeperID, req.RequestID)
	if err == nil {
		ids := make([]string, 0, len(mine))
		for _, s := range mine {
			ids = append(ids, s.ID)
		}
		sort.Strings(ids)
		if err = c.destroy(ctx, req.Provider.KeeperID, ids); err == nil {
			return cause
		}
	}
	e := &driversdk.Error{Code: driversdk.CodeOf(cause), Message: cause.Error()}
	if e.Code == "" {
		e.Code = driversdk.CodeDriverFailed
	}
	e.Message += fmt.Sprintf("; the servers already made could not all be deleted (%s): they are tagged %s=%s (soulctl cloud orphans lists them)",
		driversdk.CodeOf(err), metaRequestID, req.RequestID)
	return e
}

// requestServers returns this keeper's servers of a request by index.
func (c *clients) requestServers(ctx context.Context, keeper, requestID string) (map[int]servers.Server, error) {
	all, err := c.listServers(ctx)
	if err != nil {
		return nil, err
	}
	out := map[int]servers.Server{}
	for _, s := range all {
		if s.Metadata[metaRequestID] != requestID {
			continue
		}
		if !owned(&s, keeper) {
			return nil, driversdk.Errorf(driversdk.CodeNotOwned, "server %s carries request id %s but not this keeper's tag", s.ID, requestID)
		}
		i, err := strconv.Atoi(s.Metadata[metaIndex])
		if err != nil {
			continue
		}
		if prev, ok := out[i]; !ok || s.Created.Before(prev.Created) {
			out[i] = s
		}
	}
	return out, nil
}

func (c *clients) listServers(ctx context.Context) ([]servers.Server, error) {
	pages, err := servers.List(c.compute, servers.ListOpts{}).AllPages(ctx)
	if err != nil {
		return nil, cloudError("list servers", err)
	}
	all, err := servers.ExtractServers(pages)
	if err != nil {
		return nil, cloudError("list servers", err)
	}
	return all, nil
}

// owned reports whether a server was made by this keeper deployment: it
// carries the driver's request id and keeper tags, the latter equal to
// keeper.
func owned(s *servers.Server, keeper string) bool {
	_, ok := s.Metadata[metaRequestID]
	k, hasKeeper := s.Metadata[metaKeeper]
	return ok && hasKeeper && k == keeper
}

func (c *clients) flavorID(ctx context.Context, ref string) (string, error) {
	f, err := flavors.Get(ctx, c.compute, ref).Extract()
	if err == nil {
		return f.ID, nil
	}
	if !gophercloud.ResponseCodeIs(err, 404) {
		return "", cloudError("look up flavor "+ref, err)
	}
	pages, err := flavors.ListDetail(c.compute, flavors.ListOpts{AccessType: flavors.AllAccess}).AllPages(ctx)
	if err != nil {
		return "", cloudError("list flavors", err)
	}
	all, err := flavors.ExtractFlavors(pages)
	if err != nil {
		return "", cloudError("list flavors", err)
	}
	for _, f := range all {
		if f.Name == ref {
			return f.ID, nil
		}
	}
	return "", &driversdk.Error{Code: driversdk.CodeProfileInvalid, Field: "flavor", Message: fmt.Sprintf("the cloud has no flavor with the ID or name %q", ref)}
}

// Destroy deletes servers this keeper made, with the floating IPs it gave
// them. It checks every ID before it deletes any: one that is not this
// keeper's fails the call with driver.not_owned and nothing is deleted.
func (d *Driver) Destroy(ctx context.Context, req driversdk.DestroyRequest) error {
	c, err := connect(ctx, req.Provider)
	if err != nil {
		return err
	}
	return c.destroy(ctx, req.Provider.KeeperID, req.VMIDs)
}

func (c *clients) destroy(ctx context.Context, keeper string, ids []string) error {
	live := make([]string, 0, len(ids))
	for _, id := range ids {
		s, err := c.server(ctx, id)
		if err != nil {
			return err
		}
		if s == nil {
			continue // deleted already
		}
		if !owned(s, keeper) {
			return driversdk.Errorf(driversdk.CodeNotOwned, "server %s does not carry this keeper's %s tag: not deleting it (nor the others of this call)", id, metaKeeper)
		}
		live = append(live, id)
	}
	for _, id := range live {
		if err := c.deleteFloatingIPs(ctx, keeper, id); err != nil {
			return err
		}
		if err := servers.Delete(ctx, c.compute, id).ExtractErr(); err != nil && !gophercloud.ResponseCodeIs(err, 404) {
			return cloudError("delete server "+id, err)
		}
	}
	for _, id := range live {
		if err := c.waitGone(ctx, id); err != nil {
			return err
		}
	}
	return nil
}

// server returns a server, nil for one that existed and is deleted, and
// vm.not_found for an ID the cloud never had. Nova answers 404 for both,
// and a cloud may also answer 404 for a server it made a moment ago; its
// instance actions (microversion 2.21) tell the three apart: none for an
// unknown ID, a delete action for a deleted server, and otherwise the
// server exists and is looked for again.
func (c *clients) server(ctx context.Context, id string) (*servers.Server, error) {
	for poll := 100 * time.Millisecond; ; poll = min(2*poll, 2*time.Second) {
		s, err := servers.Get(ctx, c.compute, id).Extract()
		if err == nil {
			if s.Status == "DELETED" || s.Status == "SOFT_DELETED" {
				return nil, nil
			}
			return s, nil
		}
		if !gophercloud.ResponseCodeIs(err, 404) {
			return nil, cloudError("get server "+id, err)
		}
		mv := *c.compute
		mv.Microversion = "2.21"
		pages, err := instanceactions.List(&mv, id, nil).AllPages(ctx)
		if gophercloud.ResponseCodeIs(err, 404) {
			return nil, driversdk.Errorf(driversdk.CodeVMNotFound, "the cloud has no server %s", id)
		}
		if err != nil {
			return nil, cloudError("get the actions of server "+id, err)
		}
		actions, err := instanceactions.ExtractInstanceActions(pages)
		if err != nil {
			return nil, cloudError("get the actions of server "+id, err)
		}
		for _, a := range actions {
			if a.Action == "delete" {
				return nil, nil
			}
		}
		t := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, driversdk.Errorf(driversdk.CodeDriverTimeout, "server %s exists but the cloud does not show it yet, and the call's deadline passed", id)
		case <-t.C:
		}
	}
}

func (c *clients) deleteFloatingIPs(ctx context.Context, keeper, id string) error {
	pages, err := ports.List(c.network, ports.ListOpts{DeviceID: id}).AllPages(ctx)
	if err != nil {
		return cloudError("list the ports of server "+id, err)
	}
	ps, err := ports.ExtractPorts(pages)
	if err != nil {
		return cloudError("list the ports of server "+id, err)
	}
	marker := metaKeeper + "=" + keeper + " "
	for _, p := range ps {
		pages, err := floatingips.List(c.network, floatingips.ListOpts{PortID: p.ID}).AllPages(ctx)
		if err != nil {
			return cloudError("list floating IPs of server "+id, err)
		}
		fips, err := floatingips.ExtractFloatingIPs(pages)
		if err != nil {
			return cloudError("list floating IPs of server "+id, err)
		}
		for _, f := range fips {
			if !strings.HasPrefix(f.Description, marker) {
				continue // not made by this driver: Nova detaches it
			}
			if err := floatingips.Delete(ctx, c.network, f.ID).ExtractErr(); err != nil && !gophercloud.ResponseCodeIs(err, 404) {
				return cloudError("delete floating IP "+f.FloatingIP, err)
			}
		}
	}
	return nil
}

func (c *clients) waitGone(ctx context.Context, id string) error {
	for poll := 100 * time.Millisecond; ; poll = min(2*poll, 2*time.Second) {
		s, err := servers.Get(ctx, c.compute, id).Extract()
		if gophercloud.ResponseCodeIs(err, 404) || (err == nil && s.Status == "DELETED") {
			return nil
		}
		if err != nil {
			return cloudError("wait for server "+id+" to go", err)
		}
		t := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return driversdk.Errorf(driversdk.CodeDriverTimeout, "server %s is still being deleted and the call's deadline passed", id)
		case <-t.C:
		}
	}
}

// Resize gives servers the spec's flavor: Nova resizes (the server stops
// and starts on the new flavor), the driver confirms the resize. A server
// on that flavor already is left alone (Unchanged).
func (d *Driver) Resize(ctx context.Context, req driversdk.ResizeRequest) ([]driversdk.ResizeResult, error) {
	spec, err := parseResizeSpec(req.Spec)
	if err != nil {
		return nil, err
	}
	c, err := connect(ctx, req.Provider)
	if err != nil {
		return nil, err
	}
	flavorID, err := c.flavorID(ctx, spec.Flavor)
	if err != nil {
		return nil, err
	}
	list := make([]*servers.Server, len(req.VMIDs))
	for i, id := range req.VMIDs {
		s, err := c.server(ctx, id)
		switch {
		case err != nil:
			return nil, err
		case s == nil:
			return nil, driversdk.Errorf(driversdk.CodeVMNotFound, "server %s is deleted", id)
		case !owned(s, req.Provider.KeeperID):
			return nil, driversdk.Errorf(driversdk.CodeNotOwned, "server %s does not carry this keeper's %s tag: not resizing it (nor the others of this call)", id, metaKeeper)
		}
		list[i] = s
	}
	out := make([]driversdk.ResizeResult, len(list))
	for i, s := range list {
		if cur, _ := s.Flavor["id"].(string); cur == flavorID && s.Status == "ACTIVE" {
			out[i] = driversdk.ResizeResult{VMID: s.ID, Unchanged: true}
			continue
		}
		if s.Status != "VERIFY_RESIZE" {
			if err := servers.Resize(ctx, c.compute, s.ID, servers.ResizeOpts{FlavorRef: flavorID}).ExtractErr(); err != nil {
				return out[:i], cloudError("resize server "+s.ID, err)
			}
			if err := d.waitStatus(ctx, c, s.ID, "VERIFY_RESIZE"); err != nil {
				return nil, err
			}
		}
		if err := servers.ConfirmResize(ctx, c.compute, s.ID).ExtractErr(); err != nil {
			return nil, cloudError("confirm the resize of server "+s.ID, err)
		}
		if err := d.waitStatus(ctx, c, s.ID, "ACTIVE"); err != nil {
			return nil, err
		}
		out[i] = driversdk.ResizeResult{VMID: s.ID, CausedDowntime: true}
	}
	return out, nil
}

func (d *Driver) waitStatus(ctx context.Context, c *clients, id, want string) error {
	poll := d.Poll
	if poll == 0 {
		poll = 200 * time.Millisecond
	}
	for {
		s, err := servers.Get(ctx, c.compute, id).Extract()
		if err != nil {
			return cloudError("wait for server "+id, err)
		}
		if s.Status == want {
			return nil
		}
		if s.Status == "ERROR" {
			return driversdk.Errorf(codeVMFailed, "server %s went to ERROR while waiting for %s", id, want)
		}
		t := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return driversdk.Errorf(driversdk.CodeDriverTimeout, "server %s is not %s yet and the call's deadline passed", id, want)
		case <-t.C:
		}
		poll = min(2*poll, 2*time.Second)
	}
}

// List returns this keeper's servers carrying every tag asked for.
func (d *Driver) List(ctx context.Context, req driversdk.ListRequest) ([]driversdk.VM, error) {
	want := map[string]string{}
	for k, v := range req.Tags {
		mk, ok := sdkTag[k]
		if !ok {
			return nil, driversdk.InvalidProfile("tags."+k, "is not a tag this driver sets")
		}
		want[mk] = v
	}
	c, err := connect(ctx, req.Provider)
	if err != nil {
		return nil, err
	}
	all, err := c.listServers(ctx)
	if err != nil {
		return nil, err
	}
	var out []driversdk.VM
	for i := range all {
		s := &all[i]
		if !owned(s, req.Provider.KeeperID) || s.Status == "DELETED" {
			continue
		}
		match := true
		for k, v := range want {
			if s.Metadata[k] != v {
				match = false
			}
		}
		if match {
			out = append(out, vmOf(s))
		}
	}
	return out, nil
}

// vmOf reports a server as a driversdk.VM. Floating addresses are
// public; fixed ones are private unless they are globally routable (a
// provider network that hands out public addresses).
func vmOf(s *servers.Server) driversdk.VM {
	vm := driversdk.VM{
		ID: s.ID, FQDN: s.Name, Addresses: addresses(s),
		Tags: map[string]string{},
		Attributes: map[string]any{
			"status": s.Status, "flavor": s.Flavor["id"], "image": s.Image["id"],
		},
	}
	for sdk, meta := range sdkTag {
		if v, ok := s.Metadata[meta]; ok {
			vm.Tags[sdk] = v
		}
	}
	if z := s.AvailabilityZone; z != "" {
		vm.Attributes["zone"] = z
	}
	for _, a := range vm.Addresses {
		if a.Kind == driversdk.AddressPublic && vm.PublicIP == "" {
			vm.PublicIP = a.IP
		}
		if a.Kind == driversdk.AddressPrivate && vm.PrivateIP == "" {
			vm.PrivateIP = a.IP
		}
	}
	vm.PrimaryIP = first(vm.PublicIP, vm.PrivateIP)
	return vm
}

// addresses reads Nova's addresses: {"net": [{"addr": …, "version": 4,
// "OS-EXT-IPS:type": "fixed"|"floating"}]}, IPv4 first, in a stable order.
func addresses(s *servers.Server) []driversdk.Address {
	nets := make([]string, 0, len(s.Addresses))
	for n := range s.Addresses {
		nets = append(nets, n)
	}
	sort.Strings(nets)
	var out []driversdk.Address
	for _, n := range nets {
		list, _ := s.Addresses[n].([]any)
		for _, item := range list {
			m, _ := item.(map[string]any)
			ip, _ := m["addr"].(string)
			addr, err := netip.ParseAddr(ip)
			if err != nil {
				continue
			}
			kind := driversdk.AddressPrivate
			if t, _ := m["OS-EXT-IPS:type"].(string); t == "floating" || !(addr.IsPrivate() || addr.IsLoopback() || addr.IsLinkLocalUnicast() || isShared(addr)) {
				kind = driversdk.AddressPublic
			}
			out = append(out, driversdk.Address{IP: ip, Kind: kind, Network: n})
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		ai, _ := netip.ParseAddr(out[i].IP)
		aj, _ := netip.ParseAddr(out[j].IP)
		return ai.Is4() && !aj.Is4()
	})
	return out
}

// isShared reports the carrier-grade NAT range 100.64.0.0/10, private in
// practice.
func isShared(a netip.Addr) bool {
	return netip.MustParsePrefix("100.64.0.0/10").Contains(a)
}
