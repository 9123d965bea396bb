// Package hcloud is the Hetzner Cloud CloudDriver (soul-cloud-hcloud), on
// Hetzner's official Go SDK, hcloud-go v2. A VM is a Hetzner server; its
// id is the server's numeric id.
//
// What it promises:
//   - idempotent create: every server carries the labels
//     soulstack.request_id, soulstack.run_id, soulstack.keeper and
//     soulstack.index (Hetzner label keys allow no colon, so the driver
//     uses driversdk's dotted spellings as they are). Create first lists
//     the servers labelled with the request id and makes only the indexes
//     that are missing; a create whose answer was lost and that is sent
//     again meets Hetzner's per-project name uniqueness (uniqueness_error)
//     and adopts the server of that name when it carries the request's
//     labels. A Create retried after a crash returns the servers already
//     made;
//   - waiting: Create returns once each server's create action succeeded
//     and the server is running with its addresses, or at the call's
//     deadline (driver.timeout; the servers stay labelled, so a retry
//     with the same request id adopts them and orphans lists them);
//   - partial failure: when a server cannot be made (quota, a bad image…)
//     Create deletes the servers it holds for the request and returns
//     the error; the message lists any it could not delete;
//   - ownership: Destroy and Resize refuse, before touching any server,
//     ids whose server lacks soulstack.request_id or carries another
//     keeper's soulstack.keeper (driver.not_owned);
//   - throttling: the SDK's retryer backs off exponentially with jitter on
//     rate_limit_exceeded, conflict, bad_gateway, timeout, 502 and 504;
//   - resize: change_type needs a stopped server: poweroff, change type,
//     poweron (caused_downtime); a server already of the type is
//     Unchanged; one that was off is left off;
//   - credentials: the provider's credentials are the API token (the
//     token alone, or {"token": "…"}); it is used in memory only, never
//     logged (the SDK's debug writer stays off) and never in an error.
//
// Hetzner cannot tell a deleted server from one that never existed, so a
// well-formed (positive numeric) id that no longer exists is taken as
// already destroyed; an id that is not a positive number is vm.not_found.
package hcloud

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"

	"github.com/soulstack/soulstack/driversdk"
)

// nameLookups is how many times a create that met uniqueness_error looks
// for the server holding the name.
const nameLookups = 5

// LabelIndex is the label holding a server's index within its request.
const LabelIndex = "soulstack.index"

// Driver is the Hetzner Cloud driver.
type Driver struct {
	// Version is sent in the User-Agent.
	Version string
	// Log receives the driver's log (never credentials); nil means
	// slog.Default().
	Log *slog.Logger
}

var _ driversdk.Driver = (*Driver)(nil)

func (d *Driver) log() *slog.Logger {
	if d.Log != nil {
		return d.Log
	}
	return slog.Default()
}

// Capabilities: resizable, idempotent and listable.
func (d *Driver) Capabilities(context.Context) (driversdk.Capabilities, error) {
	return driversdk.Capabilities{Resizable: true, IdempotencyTokens: true, Listable: true}, nil
}

// ValidateProfile checks the provider config and the profile strictly,
// without calling the API.
func (d *Driver) ValidateProfile(_ context.Context, p driversdk.Provider, profile json.RawMessage) error {
	if _, err := ParseConfig(p.Config); err != nil {
		return err
	}
	_, err := ParseProfile(profile)
	return err
}

// session is one call's client and settings.
type session struct {
	c    *hcloud.Client
	cfg  Config
	prov driversdk.Provider
}

func (d *Driver) session(p driversdk.Provider) (*session, error) {
	cfg, err := ParseConfig(p.Config)
	if err != nil {
		return nil, err
	}
	tok, err := token(p.Credentials)
	if err != nil {
		return nil, err
	}
	c := hcloud.NewClient(
		hcloud.WithToken(tok),
		hcloud.WithEndpoint(cfg.Endpoint),
		hcloud.WithApplication("soulstack", d.Version),
		hcloud.WithRetryOpts(hcloud.RetryOpts{
			BackoffFunc: hcloud.ExponentialBackoffWithOpts(hcloud.ExponentialBackoffOpts{
				Base: cfg.RetryBase, Multiplier: 2, Cap: 30 * time.Second, Jitter: true,
			}),
			MaxRetries: cfg.MaxRetries,
		}),
		hcloud.WithPollOpts(hcloud.PollOpts{BackoffFunc: hcloud.ConstantBackoff(cfg.PollInterval)}),
	)
	return &session{c: c, cfg: cfg, prov: p}, nil
}

// labelValue checks that v can be a Hetzner label value.
func labelValue(what, v string) (string, error) {
	if !reLabelValue.MatchString(v) {
		return "", driversdk.Errorf(CodeLabelInvalid, "the %s %q cannot be a Hetzner label value (up to 63 letters, digits, -, _ and .)", what, v)
	}
	return v, nil
}

// ownerSelector is the label selector of the servers this keeper made.
func (s *session) ownerSelector() string {
	if s.prov.KeeperID != "" {
		return driversdk.TagRequestID + "," + driversdk.TagKeeper + "=" + s.prov.KeeperID
	}
	return driversdk.TagRequestID
}

// owned reports whether a server carries this keeper's labels.
func (s *session) owned(srv *hcloud.Server) bool {
	return srv.Labels[driversdk.TagRequestID] != "" && srv.Labels[driversdk.TagKeeper] == s.prov.KeeperID
}

// Create makes req.Count servers, or returns those a previous attempt
// with the same request id made.
func (d *Driver) Create(ctx context.Context, req driversdk.CreateRequest) ([]driversdk.VM, error) {
	s, err := d.session(req.Provider)
	if err != nil {
		return nil, err
	}
	prof, err := ParseProfile(req.Profile)
	if err != nil {
		return nil, err
	}
	if req.Count < 1 {
		return nil, driversdk.InvalidProfile("count", "must be at least 1")
	}
	if len(req.Names) != 0 && len(req.Names) != req.Count {
		return nil, driversdk.Errorf(driversdk.CodeDriverFailed, "%d names for %d VMs", len(req.Names), req.Count)
	}
	labels, err := s.labels(prof, req)
	if err != nil {
		return nil, err
	}
	have, err := s.byRequest(ctx, req.RequestID)
	if err != nil {
		return nil, mapError("look up the request's servers", err)
	}
	opts, err := s.createOpts(ctx, prof, req)
	if err != nil {
		return nil, err
	}
	servers := make([]*hcloud.Server, req.Count)
	var actions []*hcloud.Action
	for i := range servers {
		servers[i] = have[i]
	}
	for i := range servers {
		if servers[i] != nil {
			continue
		}
		o := opts
		o.Name = s.name(req, i)
		o.Labels = map[string]string{LabelIndex: strconv.Itoa(i)}
		for k, v := range labels {
			o.Labels[k] = v
		}
		o.UserData = userdata(req, i)
		srv, acts, err := s.createOne(ctx, o, req.RequestID)
		if err != nil && ctx.Err() != nil {
			// Out of time: what was made stays labelled with the request,
			// for a retry to adopt or orphans to list.
			return nil, mapError(fmt.Sprintf("create server %d of %d", i+1, req.Count), ctx.Err())
		}
		if err != nil {
			return nil, d.rollback(ctx, s, req.RequestID, servers, fmt.Sprintf("create server %d of %d", i+1, req.Count), err)
		}
		d.log().InfoContext(ctx, "server created", "server_id", srv.ID, "name", srv.Name, "request_id", req.RequestID)
		servers[i] = srv
		actions = append(actions, acts...)
	}
	if err := s.c.Action.WaitFor(ctx, actions...); err != nil {
		var ae hcloud.ActionError
		if errors.As(err, &ae) {
			return nil, d.rollback(ctx, s, req.RequestID, servers, "wait for the create actions", err)
		}
		return nil, mapError("wait for the create actions", err)
	}
	vms := make([]driversdk.VM, len(servers))
	for i, srv := range servers {
		ready, err := s.waitRunning(ctx, srv.ID, prof)
		if err != nil {
			return nil, mapError(fmt.Sprintf("wait for server %d to run", srv.ID), err)
		}
		vms[i] = s.vm(ready)
	}
	return vms, nil
}

// labels are the keeper's labels every server of req carries.
func (s *session) labels(prof Profile, req driversdk.CreateRequest) (map[string]string, error) {
	out := map[string]string{}
	for k, v := range prof.Labels {
		out[k] = v
	}
	for _, kv := range [][2]string{
		{driversdk.TagRequestID, req.RequestID}, {driversdk.TagRunID, req.RunID}, {driversdk.TagKeeper, s.prov.KeeperID},
	} {
		if kv[1] == "" && kv[0] != driversdk.TagRequestID {
			continue
		}
		v, err := labelValue(kv[0], kv[1])
		if err != nil {
			return nil, err
		}
		if v == "" {
			return nil, driversdk.Errorf(CodeLabelInvalid, "the request has no request id")
		}
		out[kv[0]] = v
	}
	return out, nil
}

// name is server i's name: the keeper's predicted FQDN when there is one,
// otherwise soulstack-<hash of the request id>-<i>.
func (s *session) name(req driversdk.CreateRequest, i int) string {
	if len(req.Names) == req.Count {
		return strings.TrimSuffix(req.Names[i], ".")
	}
	sum := sha256.Sum256([]byte(req.RequestID))
	return fmt.Sprintf("soulstack-%s-%d", hex.EncodeToString(sum[:6]), i)
}

// userdata is server i's cloud-init userdata: the keeper's, or a
// cloud-config trusting the keeper's key when the keeper sends none.
func userdata(req driversdk.CreateRequest, i int) string {
	if len(req.Userdata) == req.Count && req.Userdata[i] != "" {
		return req.Userdata[i]
	}
	if len(req.AuthorizedKeys) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("#cloud-config\nssh_authorized_keys:\n")
	for _, k := range req.AuthorizedKeys {
		line, _ := json.Marshal(strings.TrimSpace(k))
		fmt.Fprintf(&b, "  - %s\n", line)
	}
	return b.String()
}

// byRequest returns this keeper's servers of a request by their index.
func (s *session) byRequest(ctx context.Context, requestID string) (map[int]*hcloud.Server, error) {
	if _, err := labelValue(driversdk.TagRequestID, requestID); err != nil {
		return nil, err
	}
	list, err := s.c.Server.AllWithOpts(ctx, hcloud.ServerListOpts{ListOpts: hcloud.ListOpts{
		LabelSelector: s.ownerSelector() + "," + driversdk.TagRequestID + "=" + requestID,
	}})
	if err != nil {
		return nil, err
	}
	out := map[int]*hcloud.Server{}
	for _, srv := range list {
		i, err := strconv.Atoi(srv.Labels[LabelIndex])
		if err != nil || srv.Status == hcloud.ServerStatusDeleting {
			continue
		}
		out[i] = srv
	}
	return out, nil
}

// createOpts resolves the profile's names into the create request all
// servers share.
func (s *session) createOpts(ctx context.Context, p Profile, req driversdk.CreateRequest) (hcloud.ServerCreateOpts, error) {
	o := hcloud.ServerCreateOpts{
		ServerType: &hcloud.ServerType{Name: p.ServerType},
		Image:      &hcloud.Image{Name: p.Image},
		PublicNet:  &hcloud.ServerCreatePublicNet{EnableIPv4: p.ipv4(), EnableIPv6: p.ipv6()},
	}
	if id, err := strconv.ParseInt(p.Image, 10, 64); err == nil {
		o.Image = &hcloud.Image{ID: id}
	}
	if id, err := strconv.ParseInt(p.ServerType, 10, 64); err == nil {
		o.ServerType = &hcloud.ServerType{ID: id}
	}
	loc := p.Location
	if loc == "" {
		loc = s.prov.Region
	}
	if loc != "" {
		o.Location = &hcloud.Location{Name: loc}
	}
	for i, ref := range p.Networks {
		n, _, err := s.c.Network.Get(ctx, ref)
		if err := found(fmt.Sprintf("networks[%d]", i), ref, n != nil, err); err != nil {
			return o, err
		}
		o.Networks = append(o.Networks, n)
	}
	for i, ref := range p.Firewalls {
		f, _, err := s.c.Firewall.Get(ctx, ref)
		if err := found(fmt.Sprintf("firewalls[%d]", i), ref, f != nil, err); err != nil {
			return o, err
		}
		o.Firewalls = append(o.Firewalls, &hcloud.ServerCreateFirewall{Firewall: *f})
	}
	for i, ref := range p.SSHKeys {
		k, _, err := s.c.SSHKey.Get(ctx, ref)
		if err := found(fmt.Sprintf("ssh_keys[%d]", i), ref, k != nil, err); err != nil {
			return o, err
		}
		o.SSHKeys = append(o.SSHKeys, k)
	}
	if p.PlacementGroup != "" {
		g, _, err := s.c.PlacementGroup.Get(ctx, p.PlacementGroup)
		if err := found("placement_group", p.PlacementGroup, g != nil, err); err != nil {
			return o, err
		}
		o.PlacementGroup = g
	}
	return o, nil
}

// found turns a name lookup into a profile error when it failed.
func found(field, ref string, ok bool, err error) error {
	if err != nil {
		return mapError("look up "+field, err)
	}
	if !ok {
		return driversdk.InvalidProfile(field, fmt.Sprintf("no %q in the project", ref))
	}
	return nil
}

// createOne creates one server. A create that meets a server of its name
// adopts it when it carries the request's labels (an earlier attempt
// whose answer was lost); otherwise the name belongs to someone else.
func (s *session) createOne(ctx context.Context, o hcloud.ServerCreateOpts, requestID string) (*hcloud.Server, []*hcloud.Action, error) {
	res, _, err := s.c.Server.Create(ctx, o)
	if err == nil {
		return res.Server, append([]*hcloud.Action{res.Action}, res.NextActions...), nil
	}
	if !hcloud.IsError(err, hcloud.ErrorCodeUniquenessError) {
		return nil, nil, err
	}
	// The server holding the name may not show at once (a create just
	// accepted): look a few times before taking the name for another's.
	var srv *hcloud.Server
	for try := 0; srv == nil && try < nameLookups; try++ {
		if try > 0 {
			select {
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			case <-time.After(s.cfg.PollInterval):
			}
		}
		var gerr error
		if srv, _, gerr = s.c.Server.GetByName(ctx, o.Name); gerr != nil {
			return nil, nil, gerr
		}
	}
	if srv == nil || !s.owned(srv) || srv.Labels[driversdk.TagRequestID] != requestID || srv.Labels[LabelIndex] != o.Labels[LabelIndex] {
		return nil, nil, driversdk.Errorf(CodeNameTaken, "a server named %q exists and was not made by this request", o.Name)
	}
	return srv, nil, nil
}

// rollback deletes the servers made for a request after a create failed,
// and returns the create's error, naming any server left behind. The
// servers are those the call holds (made or adopted) and those a listing
// by the request's label finds: a server just made may be missing from
// the listing for a moment. It runs within the call's deadline: what it
// cannot delete in time stays labelled with the request, and the error
// says so.
func (d *Driver) rollback(rctx context.Context, s *session, requestID string, held []*hcloud.Server, op string, cause error) error {
	err := mapError(op, cause)
	doomed := map[int64]*hcloud.Server{}
	for _, srv := range held {
		if srv != nil {
			doomed[srv.ID] = srv
		}
	}
	listed, lerr := s.byRequest(rctx, requestID)
	for _, srv := range listed {
		doomed[srv.ID] = srv
	}
	ids := make([]int64, 0, len(doomed))
	for id := range doomed {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	var left []string
	for _, id := range ids {
		if _, _, derr := s.c.Server.DeleteWithResult(rctx, doomed[id]); derr != nil && !hcloud.IsError(derr, hcloud.ErrorCodeNotFound) {
			left = append(left, strconv.FormatInt(id, 10))
			continue
		}
		d.log().InfoContext(rctx, "server deleted after a failed create", "server_id", id, "request_id", requestID)
	}
	switch {
	case len(left) > 0:
		return fmt.Errorf("%w; servers %s of request %s could not be deleted: soulctl cloud orphans lists them", err, strings.Join(left, ", "), requestID)
	case lerr != nil:
		return fmt.Errorf("%w; the servers of request %s could not be listed to delete them all (%v): soulctl cloud orphans lists any left", err, requestID, mapError("list", lerr))
	}
	return err
}

// waitRunning polls a server until it runs and has the address the
// profile asks for. A server the API does not show yet (eventual
// consistency just after create) is polled again.
func (s *session) waitRunning(ctx context.Context, id int64, p Profile) (*hcloud.Server, error) {
	for {
		srv, _, err := s.c.Server.GetByID(ctx, id)
		if err != nil {
			return nil, err
		}
		if srv != nil && srv.Status == hcloud.ServerStatusRunning && hasAddresses(srv, p) {
			return srv, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(s.cfg.PollInterval):
		}
	}
}

func hasAddresses(srv *hcloud.Server, p Profile) bool {
	if p.ipv4() && srv.PublicNet.IPv4.IP == nil {
		return false
	}
	if p.ipv6() && srv.PublicNet.IPv6.IP == nil {
		return false
	}
	return len(srv.PrivateNet) >= len(p.Networks)
}

// vm reports a server.
func (s *session) vm(srv *hcloud.Server) driversdk.VM {
	vm := driversdk.VM{ID: strconv.FormatInt(srv.ID, 10), FQDN: srv.Name, Tags: map[string]string{}, Attributes: map[string]any{
		"status": string(srv.Status), "name": srv.Name,
	}}
	if !strings.Contains(srv.Name, ".") && s.prov.FQDNSuffix != "" {
		vm.FQDN = srv.Name + "." + strings.TrimPrefix(s.prov.FQDNSuffix, ".")
	}
	if srv.ServerType != nil {
		vm.Attributes["server_type"] = srv.ServerType.Name
	}
	if srv.Location != nil {
		vm.Attributes["location"] = srv.Location.Name
	}
	if srv.Image != nil {
		vm.Attributes["image"] = srv.Image.Name
	}
	for _, k := range []string{driversdk.TagRequestID, driversdk.TagRunID, driversdk.TagKeeper} {
		if v, ok := srv.Labels[k]; ok {
			vm.Tags[k] = v
		}
	}
	if ip := srv.PublicNet.IPv4.IP; ip != nil && !ip.IsUnspecified() {
		vm.PublicIP = ip.String()
		vm.Addresses = append(vm.Addresses, driversdk.Address{IP: vm.PublicIP, Kind: driversdk.AddressPublic, Network: "ipv4"})
	}
	var v6 string
	if ip := srv.PublicNet.IPv6.IP; ip != nil && !ip.IsUnspecified() {
		// Hetzner assigns a /64; the server's own address is its ::1.
		a := append(net.IP(nil), ip.To16()...)
		a[15] |= 1
		v6 = a.String()
		vm.Addresses = append(vm.Addresses, driversdk.Address{IP: v6, Kind: driversdk.AddressPublic, Network: "ipv6"})
	}
	for _, pn := range srv.PrivateNet {
		if pn.IP == nil {
			continue
		}
		network := ""
		if pn.Network != nil {
			network = strconv.FormatInt(pn.Network.ID, 10)
			if pn.Network.Name != "" {
				network = pn.Network.Name
			}
		}
		if vm.PrivateIP == "" {
			vm.PrivateIP = pn.IP.String()
		}
		vm.Addresses = append(vm.Addresses, driversdk.Address{IP: pn.IP.String(), Kind: driversdk.AddressPrivate, Network: network})
	}
	switch {
	case vm.PublicIP != "":
		vm.PrimaryIP = vm.PublicIP
	case vm.PrivateIP != "":
		vm.PrimaryIP = vm.PrivateIP
	default:
		vm.PrimaryIP = v6
	}
	return vm
}

// serverID parses a VM id; one that is not a positive number is an id
// the driver never made.
func serverID(id string) (int64, error) {
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil || n <= 0 {
		return 0, driversdk.Errorf(driversdk.CodeVMNotFound, "%q is not a Hetzner server id", id)
	}
	return n, nil
}

// ownedServers fetches the servers of ids, refusing the lot when one is
// not this keeper's. Servers that no longer exist are left out.
func (s *session) ownedServers(ctx context.Context, ids []string) ([]*hcloud.Server, error) {
	var out []*hcloud.Server
	for _, id := range ids {
		n, err := serverID(id)
		if err != nil {
			return nil, err
		}
		srv, _, err := s.c.Server.GetByID(ctx, n)
		if err != nil {
			return nil, mapError("get server "+id, err)
		}
		if srv == nil {
			continue
		}
		if !s.owned(srv) {
			return nil, driversdk.Errorf(driversdk.CodeNotOwned, "server %s does not carry this keeper's labels (%s, %s): it was not made by this keeper, nothing was done", id, driversdk.TagRequestID, driversdk.TagKeeper)
		}
		out = append(out, srv)
	}
	return out, nil
}

// Destroy deletes servers after checking that all are this keeper's.
func (d *Driver) Destroy(ctx context.Context, req driversdk.DestroyRequest) error {
	s, err := d.session(req.Provider)
	if err != nil {
		return err
	}
	servers, err := s.ownedServers(ctx, req.VMIDs)
	if err != nil {
		return err
	}
	var actions []*hcloud.Action
	for _, srv := range servers {
		res, _, err := s.c.Server.DeleteWithResult(ctx, srv)
		if err != nil {
			if hcloud.IsError(err, hcloud.ErrorCodeNotFound) {
				continue
			}
			return mapError(fmt.Sprintf("delete server %d", srv.ID), err)
		}
		d.log().InfoContext(ctx, "server deleted", "server_id", srv.ID)
		if res != nil && res.Action != nil {
			actions = append(actions, res.Action)
		}
	}
	return mapError("wait for the delete actions", s.c.Action.WaitFor(ctx, actions...))
}

// Resize gives servers the spec's server_type: poweroff, change_type,
// poweron.
func (d *Driver) Resize(ctx context.Context, req driversdk.ResizeRequest) ([]driversdk.ResizeResult, error) {
	s, err := d.session(req.Provider)
	if err != nil {
		return nil, err
	}
	var spec Profile
	if err := strictDecode(req.Spec, &spec, ""); err != nil {
		return nil, err
	}
	if spec.ServerType == "" {
		return nil, driversdk.InvalidProfile("server_type", "a resize needs the new server_type")
	}
	servers, err := s.ownedServers(ctx, req.VMIDs)
	if err != nil {
		return nil, err
	}
	if len(servers) != len(req.VMIDs) {
		return nil, driversdk.Errorf(driversdk.CodeVMNotFound, "%d of the %d servers no longer exist", len(req.VMIDs)-len(servers), len(req.VMIDs))
	}
	out := make([]driversdk.ResizeResult, 0, len(servers))
	for _, srv := range servers {
		r, err := s.resizeOne(ctx, srv, spec)
		if err != nil {
			return out, err
		}
		d.log().InfoContext(ctx, "server resized", "server_id", srv.ID, "server_type", spec.ServerType, "unchanged", r.Unchanged)
		out = append(out, r)
	}
	return out, nil
}

func (s *session) resizeOne(ctx context.Context, srv *hcloud.Server, p Profile) (driversdk.ResizeResult, error) {
	r := driversdk.ResizeResult{VMID: strconv.FormatInt(srv.ID, 10)}
	if srv.ServerType != nil && (srv.ServerType.Name == p.ServerType || strconv.FormatInt(srv.ServerType.ID, 10) == p.ServerType) {
		r.Unchanged = true
		return r, nil
	}
	wasOn := srv.Status != hcloud.ServerStatusOff
	step := func(op string, a *hcloud.Action, err error) error {
		if err != nil {
			return mapError(fmt.Sprintf("%s server %d", op, srv.ID), err)
		}
		return mapError(fmt.Sprintf("%s server %d", op, srv.ID), s.c.Action.WaitFor(ctx, a))
	}
	if wasOn {
		a, _, err := s.c.Server.Poweroff(ctx, srv)
		if err := step("power off", a, err); err != nil {
			return r, err
		}
		r.CausedDowntime = true
	}
	st := &hcloud.ServerType{Name: p.ServerType}
	if id, err := strconv.ParseInt(p.ServerType, 10, 64); err == nil {
		st = &hcloud.ServerType{ID: id}
	}
	a, _, err := s.c.Server.ChangeType(ctx, srv, hcloud.ServerChangeTypeOpts{ServerType: st, UpgradeDisk: p.UpgradeDisk})
	if err := step("change the type of", a, err); err != nil {
		if wasOn {
			// Leave the server as it was found: running, on its old type.
			if a, _, perr := s.c.Server.Poweron(context.WithoutCancel(ctx), srv); perr == nil {
				_ = s.c.Action.WaitFor(context.WithoutCancel(ctx), a)
			}
		}
		return r, err
	}
	if wasOn {
		a, _, err := s.c.Server.Poweron(ctx, srv)
		if err := step("power on", a, err); err != nil {
			return r, err
		}
	}
	return r, nil
}

// List lists this keeper's servers carrying every tag.
func (d *Driver) List(ctx context.Context, req driversdk.ListRequest) ([]driversdk.VM, error) {
	s, err := d.session(req.Provider)
	if err != nil {
		return nil, err
	}
	sel := []string{s.ownerSelector()}
	keys := make([]string, 0, len(req.Tags))
	for k := range req.Tags {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !reLabelKey.MatchString(k) {
			return nil, driversdk.Errorf(CodeLabelInvalid, "the tag key %q cannot be a Hetzner label key", k)
		}
		v, err := labelValue("tag "+k, req.Tags[k])
		if err != nil {
			return nil, err
		}
		sel = append(sel, k+"="+v)
	}
	list, err := s.c.Server.AllWithOpts(ctx, hcloud.ServerListOpts{ListOpts: hcloud.ListOpts{LabelSelector: strings.Join(sel, ",")}})
	if err != nil {
		return nil, mapError("list servers", err)
	}
	out := make([]driversdk.VM, 0, len(list))
	for _, srv := range list {
		if srv.Status == hcloud.ServerStatusDeleting || !s.owned(srv) {
			continue
		}
		out = append(out, s.vm(srv))
	}
	return out, nil
}
