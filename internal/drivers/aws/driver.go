package aws

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/soulstack/soulstack/driversdk"
)

// Tag keys on EC2. EC2 accepts the colon spelling the issue and the docs
// use; VM.Tags reports them with driversdk's keys.
const (
	tagRequestID = "soulstack:request_id"
	tagRunID     = "soulstack:run_id"
	tagKeeper    = "soulstack:keeper"
	// tagIndex is the VM's index in its request: which idempotency token
	// made it.
	tagIndex = "soulstack:index"
	tagName  = "Name"
)

// tokenGenerations is how many idempotency tokens one VM slot may use: a
// slot whose token names a terminated instance (a failed create that was
// cleaned up) moves on to the next.
const tokenGenerations = 4

// Driver is the EC2 CloudDriver. It keeps no state between calls: what it
// made is found again through tags and idempotency tokens.
type Driver struct {
	log *slog.Logger
}

var _ driversdk.Driver = (*Driver)(nil)

// New returns the driver; log defaults to slog's default logger.
func New(log *slog.Logger) *Driver {
	if log == nil {
		log = slog.Default()
	}
	return &Driver{log: log}
}

// Capabilities: EC2 resizes (stop, change type, start), takes
// idempotency tokens and filters by tag.
func (d *Driver) Capabilities(context.Context) (driversdk.Capabilities, error) {
	return driversdk.Capabilities{Resizable: true, IdempotencyTokens: true, Listable: true}, nil
}

// ValidateProfile checks the provider's config and credentials' shape and
// the profile, without calling EC2.
func (d *Driver) ValidateProfile(_ context.Context, p driversdk.Provider, raw json.RawMessage) error {
	if _, err := parseConfig(p); err != nil {
		return err
	}
	if _, err := parseCredentials(p.Credentials); err != nil {
		return err
	}
	_, err := parseProfile(raw)
	return err
}

// clientToken is the idempotency token of VM slot i of a request: the
// same for every retry of the request, different per keeper deployment,
// at most EC2's 64 characters.
func clientToken(keeperID, requestID string, i, gen int) string {
	sum := sha256.Sum256([]byte(keeperID + "\x00" + requestID + "\x00" + strconv.Itoa(i) + "\x00" + strconv.Itoa(gen)))
	return "soulstack-" + hex.EncodeToString(sum[:20])
}

// Create makes req.Count instances, one RunInstances per VM, each with its
// own idempotency token and tags, then waits until all run with their
// addresses. A retried request adopts the instances it finds by tag or
// token. When a VM cannot be made, it terminates every instance of the
// request and says which; when the deadline passes, it names the
// instances left (they carry the request's tags).
func (d *Driver) Create(ctx context.Context, req driversdk.CreateRequest) ([]driversdk.VM, error) {
	s, err := newSession(ctx, req.Provider)
	if err != nil {
		return nil, err
	}
	p, err := parseProfile(req.Profile)
	if err != nil {
		return nil, err
	}
	if req.RequestID == "" || req.Count < 1 {
		return nil, driversdk.Errorf(driversdk.CodeProfileInvalid, "create needs a request id and a count of at least 1")
	}
	existing, err := s.findRequest(ctx, req.RequestID)
	if err != nil {
		return nil, mapError("look up the request's instances", err)
	}
	ids := make([]string, req.Count)
	for i := range ids {
		if inst, ok := existing[i]; ok {
			ids[i] = aws.ToString(inst.InstanceId)
			continue
		}
		ids[i], err = s.run(ctx, req, p, i)
		if err != nil {
			return nil, d.createFailed(ctx, s, ids, fmt.Sprintf("make VM %d of %d", i+1, req.Count), err)
		}
	}
	insts, err := s.waitState(ctx, ids, types.InstanceStateNameRunning, true)
	if err != nil {
		return nil, d.createFailed(ctx, s, ids, "wait for the instances to run", err)
	}
	vms := make([]driversdk.VM, len(insts))
	for i, inst := range insts {
		vms[i] = toVM(inst)
	}
	return vms, nil
}

// createFailed cleans up after a failed Create: on a deadline it names
// the instances left; otherwise it terminates them.
func (d *Driver) createFailed(ctx context.Context, s *session, ids []string, op string, err error) error {
	made := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return id == "" })
	e := mapError(op, err).(*driversdk.Error)
	if len(made) == 0 {
		return e
	}
	if e.Code == driversdk.CodeDriverTimeout {
		e.Message += fmt.Sprintf("; instances %s were made and are left running: a retry of the request adopts them, soulctl cloud orphans lists them", strings.Join(made, ", "))
		return e
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if _, terr := s.ec2.TerminateInstances(cctx, &ec2.TerminateInstancesInput{InstanceIds: made}); terr != nil {
		d.log.WarnContext(ctx, "terminate the instances of a failed create", "instances", made, "error", mapError("terminate", terr))
		e.Message += fmt.Sprintf("; instances %s were made and could NOT be terminated (%v): they carry the request's tags, soulctl cloud orphans lists them", strings.Join(made, ", "), mapError("terminate", terr))
		return e
	}
	e.Message += fmt.Sprintf("; the instances made for the request (%s) were terminated", strings.Join(made, ", "))
	return e
}

// findRequest returns this request's live instances by their slot index.
func (s *session) findRequest(ctx context.Context, requestID string) (map[int]types.Instance, error) {
	insts, err := s.describe(ctx, nil, []types.Filter{
		{Name: aws.String("tag:" + tagRequestID), Values: []string{requestID}},
		{Name: aws.String("instance-state-name"), Values: []string{"pending", "running", "stopping", "stopped"}},
	})
	if err != nil {
		return nil, err
	}
	out := map[int]types.Instance{}
	for _, inst := range insts {
		tags := tagMap(inst.Tags)
		if tags[tagKeeper] != s.prov.KeeperID {
			continue
		}
		i, err := strconv.Atoi(tags[tagIndex])
		if err != nil {
			continue
		}
		if _, dup := out[i]; !dup {
			out[i] = inst
		}
	}
	return out, nil
}

// run makes VM slot i (or finds the instance its token already made) and
// returns its id.
func (s *session) run(ctx context.Context, req driversdk.CreateRequest, p profile, i int) (string, error) {
	in := runInput(req, p, i)
	for gen := range tokenGenerations {
		in.ClientToken = aws.String(clientToken(req.Provider.KeeperID, req.RequestID, i, gen))
		out, err := s.ec2.RunInstances(ctx, in)
		var inst types.Instance
		switch {
		case apiCode(err) == "IdempotentParameterMismatch":
			// The token made an instance with other parameters (the
			// retry names the VMs differently): find it by its token.
			found, derr := s.describe(ctx, nil, []types.Filter{{Name: aws.String("client-token"), Values: []string{*in.ClientToken}}})
			if derr != nil || len(found) == 0 {
				return "", err
			}
			inst = found[0]
		case err != nil:
			return "", err
		case len(out.Instances) != 1:
			return "", fmt.Errorf("RunInstances answered %d instances for one", len(out.Instances))
		default:
			inst = out.Instances[0]
		}
		if gone(inst) {
			continue
		}
		return aws.ToString(inst.InstanceId), nil
	}
	return "", driversdk.Errorf(CodeVMTerminated, "every idempotency token of VM %d of request %s names a terminated instance", i, req.RequestID)
}

// runInput is the RunInstances request of VM slot i: its name (the
// predicted one, or vm-<request hash>-<i+1> under the provider's FQDN
// suffix), userdata, ownership tags and the profile's placement.
func runInput(req driversdk.CreateRequest, p profile, i int) *ec2.RunInstancesInput {
	name := fmt.Sprintf("vm-%s-%d", shortID(req.RequestID), i+1)
	if suffix := strings.Trim(req.Provider.FQDNSuffix, "."); suffix != "" {
		name += "." + suffix
	}
	if len(req.Names) == req.Count {
		name = strings.TrimSuffix(req.Names[i], ".")
	}
	userdata := ""
	if len(req.Userdata) == req.Count && req.Userdata[i] != "" {
		userdata = req.Userdata[i]
	} else if len(req.AuthorizedKeys) > 0 {
		userdata = authorizedKeysCloudConfig(req.AuthorizedKeys)
	}
	tags := []types.Tag{
		{Key: aws.String(tagName), Value: aws.String(name)},
		{Key: aws.String(tagRequestID), Value: aws.String(req.RequestID)},
		{Key: aws.String(tagRunID), Value: aws.String(req.RunID)},
		{Key: aws.String(tagKeeper), Value: aws.String(req.Provider.KeeperID)},
		{Key: aws.String(tagIndex), Value: aws.String(strconv.Itoa(i))},
	}
	for _, k := range sortedKeys(p.Tags) {
		tags = append(tags, types.Tag{Key: aws.String(k), Value: aws.String(p.Tags[k])})
	}
	in := &ec2.RunInstancesInput{
		ImageId:      aws.String(p.ImageID),
		InstanceType: types.InstanceType(p.InstanceType),
		MinCount:     aws.Int32(1),
		MaxCount:     aws.Int32(1),
		TagSpecifications: []types.TagSpecification{
			{ResourceType: types.ResourceTypeInstance, Tags: tags},
			{ResourceType: types.ResourceTypeVolume, Tags: tags},
		},
	}
	if userdata != "" {
		in.UserData = aws.String(base64.StdEncoding.EncodeToString([]byte(userdata)))
	}
	placeInstance(in, p)
	return in
}

// placeInstance sets the profile's network, key, zone, instance profile
// and root volume on in.
func placeInstance(in *ec2.RunInstancesInput, p profile) {
	if p.SubnetID != "" {
		in.SubnetId = aws.String(p.SubnetID)
	}
	if len(p.SecurityGroupIDs) > 0 {
		in.SecurityGroupIds = p.SecurityGroupIDs
	}
	if p.KeyName != "" {
		in.KeyName = aws.String(p.KeyName)
	}
	if p.AvailabilityZone != "" {
		in.Placement = &types.Placement{AvailabilityZone: aws.String(p.AvailabilityZone)}
	}
	if p.IAMInstanceProfile != "" {
		in.IamInstanceProfile = &types.IamInstanceProfileSpecification{Name: aws.String(p.IAMInstanceProfile)}
	}
	if p.VolumeSizeGB > 0 {
		ebs := &types.EbsBlockDevice{VolumeSize: aws.Int32(p.VolumeSizeGB), DeleteOnTermination: aws.Bool(true)}
		if p.VolumeType != "" {
			ebs.VolumeType = types.VolumeType(p.VolumeType)
		}
		in.BlockDeviceMappings = []types.BlockDeviceMapping{{DeviceName: aws.String(p.RootDevice), Ebs: ebs}}
	}
}

// gone reports whether an instance is terminated or on its way there.
func gone(inst types.Instance) bool {
	if inst.State == nil {
		return false
	}
	n := inst.State.Name
	return n == types.InstanceStateNameTerminated || n == types.InstanceStateNameShuttingDown
}

// describe lists instances by id and/or filters, every page.
func (s *session) describe(ctx context.Context, ids []string, filters []types.Filter) ([]types.Instance, error) {
	in := &ec2.DescribeInstancesInput{InstanceIds: ids, Filters: filters}
	if len(ids) == 0 {
		in.MaxResults = aws.Int32(1000)
	}
	var out []types.Instance
	pages := ec2.NewDescribeInstancesPaginator(s.ec2, in)
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, r := range page.Reservations {
			out = append(out, r.Instances...)
		}
	}
	return out, nil
}

// waitState polls until every instance of ids is in state want (and, when
// addresses, has its private address), returning them in ids' order. An
// instance not yet visible (EC2 is eventually consistent) is waited for.
func (s *session) waitState(ctx context.Context, ids []string, want types.InstanceStateName, addresses bool) ([]types.Instance, error) {
	for {
		insts, err := s.describe(ctx, ids, nil)
		if err != nil && apiCode(err) != "InvalidInstanceID.NotFound" {
			return nil, err
		}
		byID := map[string]types.Instance{}
		for _, inst := range insts {
			byID[aws.ToString(inst.InstanceId)] = inst
		}
		ready := make([]types.Instance, 0, len(ids))
		for _, id := range ids {
			inst, ok := byID[id]
			if !ok {
				break
			}
			if want != types.InstanceStateNameTerminated && gone(inst) {
				reason := ""
				if inst.StateReason != nil {
					reason = ": " + aws.ToString(inst.StateReason.Message)
				}
				return nil, driversdk.Errorf(driversdk.CodeDriverUnavailable, "instance %s was terminated while it started%s", id, reason)
			}
			if inst.State == nil || inst.State.Name != want || (addresses && aws.ToString(inst.PrivateIpAddress) == "") {
				break
			}
			ready = append(ready, inst)
		}
		if len(ready) == len(ids) {
			return ready, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(s.cfg.pollInterval):
		}
	}
}

// owned describes ids and checks each carries this keeper's tag. An id EC2
// does not know is vm.not_found; one without the tag is driver.not_owned.
// Nothing is changed.
func (s *session) owned(ctx context.Context, ids []string) ([]types.Instance, error) {
	insts, err := s.describe(ctx, ids, nil)
	if c := apiCode(err); c == "InvalidInstanceID.NotFound" || c == "InvalidInstanceID.Malformed" {
		var unknown []string
		for _, id := range ids {
			if _, err := s.describe(ctx, []string{id}, nil); err != nil {
				if c := apiCode(err); c == "InvalidInstanceID.NotFound" || c == "InvalidInstanceID.Malformed" {
					unknown = append(unknown, id)
					continue
				}
				return nil, err
			}
		}
		return nil, driversdk.Errorf(driversdk.CodeVMNotFound, "EC2 knows no instance %s", strings.Join(unknown, ", "))
	}
	if err != nil {
		return nil, err
	}
	var foreign []string
	for _, inst := range insts {
		tags := tagMap(inst.Tags)
		if v, ok := tags[tagKeeper]; !ok || v != s.prov.KeeperID || tags[tagRequestID] == "" {
			foreign = append(foreign, aws.ToString(inst.InstanceId))
		}
	}
	if len(foreign) > 0 {
		return nil, driversdk.Errorf(driversdk.CodeNotOwned, "instances %s do not carry this keeper's %s tag; nothing was changed", strings.Join(foreign, ", "), tagKeeper)
	}
	return insts, nil
}

// Destroy terminates instances after checking every one is this keeper's;
// instances already terminated are skipped.
func (d *Driver) Destroy(ctx context.Context, req driversdk.DestroyRequest) error {
	if len(req.VMIDs) == 0 {
		return nil
	}
	s, err := newSession(ctx, req.Provider)
	if err != nil {
		return err
	}
	insts, err := s.owned(ctx, req.VMIDs)
	if err != nil {
		return mapError("destroy", err)
	}
	var live []string
	for _, inst := range insts {
		if !gone(inst) {
			live = append(live, aws.ToString(inst.InstanceId))
		}
	}
	if len(live) == 0 {
		return nil
	}
	_, err = s.ec2.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: live})
	return mapError("terminate", err)
}

// Resize changes the instance type: a running instance is stopped,
// changed and started again (caused_downtime), a stopped one only
// changed; one that has the type already is left alone (unchanged).
func (d *Driver) Resize(ctx context.Context, req driversdk.ResizeRequest) ([]driversdk.ResizeResult, error) {
	s, err := newSession(ctx, req.Provider)
	if err != nil {
		return nil, err
	}
	spec, err := parseResize(req.Spec)
	if err != nil {
		return nil, err
	}
	insts, err := s.owned(ctx, req.VMIDs)
	if err != nil {
		return nil, mapError("resize", err)
	}
	var out []driversdk.ResizeResult
	for _, inst := range insts {
		r, err := s.resizeOne(ctx, inst, spec)
		if err != nil {
			return out, mapError("resize "+aws.ToString(inst.InstanceId), err)
		}
		out = append(out, r)
	}
	return out, nil
}

func (s *session) resizeOne(ctx context.Context, inst types.Instance, spec resizeSpec) (driversdk.ResizeResult, error) {
	id := aws.ToString(inst.InstanceId)
	res := driversdk.ResizeResult{VMID: id}
	if string(inst.InstanceType) == spec.InstanceType {
		res.Unchanged = true
		return res, nil
	}
	if gone(inst) {
		return res, driversdk.Errorf(driversdk.CodeVMNotFound, "instance %s is terminated", id)
	}
	ids := []string{id}
	wasRunning := inst.State != nil && inst.State.Name != types.InstanceStateNameStopped
	if wasRunning {
		if _, err := s.ec2.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: ids}); err != nil {
			return res, err
		}
		if _, err := s.waitState(ctx, ids, types.InstanceStateNameStopped, false); err != nil {
			return res, err
		}
	}
	res.CausedDowntime = wasRunning
	if _, err := s.ec2.ModifyInstanceAttribute(ctx, &ec2.ModifyInstanceAttributeInput{
		InstanceId: aws.String(id), InstanceType: &types.AttributeValue{Value: aws.String(spec.InstanceType)},
	}); err != nil {
		if wasRunning {
			_, _ = s.ec2.StartInstances(context.WithoutCancel(ctx), &ec2.StartInstancesInput{InstanceIds: ids})
		}
		return res, err
	}
	if wasRunning {
		if _, err := s.ec2.StartInstances(ctx, &ec2.StartInstancesInput{InstanceIds: ids}); err != nil {
			return res, err
		}
		if _, err := s.waitState(ctx, ids, types.InstanceStateNameRunning, true); err != nil {
			return res, err
		}
	}
	return res, nil
}

// List returns this keeper's live instances carrying every tag of
// req.Tags (driversdk's keys are translated to EC2's spelling).
func (d *Driver) List(ctx context.Context, req driversdk.ListRequest) ([]driversdk.VM, error) {
	s, err := newSession(ctx, req.Provider)
	if err != nil {
		return nil, err
	}
	filters := []types.Filter{
		{Name: aws.String("tag-key"), Values: []string{tagRequestID}},
		{Name: aws.String("instance-state-name"), Values: []string{"pending", "running", "stopping", "stopped"}},
	}
	for _, k := range sortedKeys(req.Tags) {
		filters = append(filters, types.Filter{Name: aws.String("tag:" + ec2TagKey(k)), Values: []string{req.Tags[k]}})
	}
	insts, err := s.describe(ctx, nil, filters)
	if err != nil {
		return nil, mapError("list", err)
	}
	var vms []driversdk.VM
	for _, inst := range insts {
		if tagMap(inst.Tags)[tagKeeper] == req.Provider.KeeperID {
			vms = append(vms, toVM(inst))
		}
	}
	return vms, nil
}

// ec2TagKey spells a driversdk tag key the way it is on EC2.
func ec2TagKey(k string) string {
	switch k {
	case driversdk.TagRequestID:
		return tagRequestID
	case driversdk.TagRunID:
		return tagRunID
	case driversdk.TagKeeper:
		return tagKeeper
	}
	return k
}

// sdkTagKey is ec2TagKey's inverse.
func sdkTagKey(k string) string {
	switch k {
	case tagRequestID:
		return driversdk.TagRequestID
	case tagRunID:
		return driversdk.TagRunID
	case tagKeeper:
		return driversdk.TagKeeper
	}
	return k
}

func tagMap(tags []types.Tag) map[string]string {
	m := make(map[string]string, len(tags))
	for _, t := range tags {
		m[aws.ToString(t.Key)] = aws.ToString(t.Value)
	}
	return m
}

// toVM reports an instance: its Name tag as FQDN, the public address as
// primary when it has one, else the private one.
func toVM(inst types.Instance) driversdk.VM {
	tags := tagMap(inst.Tags)
	vm := driversdk.VM{
		ID:        aws.ToString(inst.InstanceId),
		FQDN:      tags[tagName],
		PublicIP:  aws.ToString(inst.PublicIpAddress),
		PrivateIP: aws.ToString(inst.PrivateIpAddress),
		Tags:      map[string]string{},
		Attributes: map[string]any{
			"instance_type": string(inst.InstanceType),
			"image_id":      aws.ToString(inst.ImageId),
			"subnet_id":     aws.ToString(inst.SubnetId),
			"vpc_id":        aws.ToString(inst.VpcId),
		},
	}
	if inst.State != nil {
		vm.Attributes["state"] = string(inst.State.Name)
	}
	if inst.Placement != nil {
		vm.Attributes["availability_zone"] = aws.ToString(inst.Placement.AvailabilityZone)
	}
	for k, v := range tags {
		vm.Tags[sdkTagKey(k)] = v
	}
	network := aws.ToString(inst.SubnetId)
	if vm.PrivateIP != "" {
		vm.Addresses = append(vm.Addresses, driversdk.Address{IP: vm.PrivateIP, Kind: driversdk.AddressPrivate, Network: network})
	}
	if vm.PublicIP != "" {
		vm.Addresses = append(vm.Addresses, driversdk.Address{IP: vm.PublicIP, Kind: driversdk.AddressPublic, Network: network})
	}
	if v6 := aws.ToString(inst.Ipv6Address); v6 != "" {
		vm.Addresses = append(vm.Addresses, driversdk.Address{IP: v6, Kind: driversdk.AddressPublic, Network: network})
	}
	vm.PrimaryIP = vm.PublicIP
	if vm.PrimaryIP == "" {
		vm.PrimaryIP = vm.PrivateIP
	}
	return vm
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func shortID(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:4])
}

// authorizedKeysCloudConfig is the userdata of a VM the keeper gave no
// userdata for: a #cloud-config that authorizes the keeper's keys.
func authorizedKeysCloudConfig(keys []string) string {
	var b strings.Builder
	b.WriteString("#cloud-config\nssh_authorized_keys:\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "  - %q\n", strings.TrimSpace(k))
	}
	return b.String()
}
