// Package nubes is the CloudDriver of Nubes (soul-cloud-nubes), the cloud
// of the second seed, through its deck-api (package deckapi: there is no
// SDK). A VM is a deck-api instance of service 28; its id is the
// instance's uid.
//
// What it promises:
//   - create: an instance and its create operation per VM, the operation's
//     parameters from the profile and the keeper's userdata (cloudInit),
//     validated, run and polled to its end (a failed operation's stages
//     and error log are in the error), then the instance polled until it
//     is running with an address (config address_key: which key of
//     state.params holds it is not public, see docs/drivers/nubes.md);
//   - tags: the API has none, so the deployment, request, run and index
//     are written in the instance's description ("soulstack keeper=…
//     request=… run=… index=…"); a create sent again with the same
//     request adopts the instances it finds for it; List reads them back,
//     so orphans and cloud drift work; Destroy and Resize refuse an
//     instance another deployment made (driver.not_owned) before changing
//     anything;
//   - partial failure: when a VM cannot be made, the instances made for
//     the request are deleted and the error names any that could not be;
//   - destroy: delete (or suspend, with destroy: suspend), polled to its
//     end; a delete ending "Услуга удалена" ("service deleted") is
//     success. The deck-api answers 404 alike for an instance deleted and
//     one that never was, so a uid it does not know is taken as already
//     destroyed; an id that is not a uid is vm.not_found;
//   - resize: a modify operation with vmCpu and vmRam; the API does not
//     say whether it restarts the VM, so a change is reported as causing
//     downtime; the same size is Unchanged;
//   - credentials: the deck-api token (or {"token": "…"}), used for each
//     call only, never logged, never in an error.
package nubes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/soulstack/soulstack/driversdk"
	"github.com/soulstack/soulstack/internal/drivers/nubes/deckapi"
)

// Error codes of the driver's own.
const (
	CodeOperationFailed = "nubes.operation_failed"
	CodeNotRunning      = "nubes.not_running"
	CodeNoAddress       = "nubes.no_address"
	CodeAPI             = "nubes.api_error"
)

// DeletedMessage is what a delete that worked may end with.
const DeletedMessage = "Услуга удалена"

// Driver is the Nubes driver.
type Driver struct {
	// Version is sent in the User-Agent.
	Version string
	// Log receives the driver's log (never the token); nil: slog.Default().
	Log *slog.Logger
}

var _ driversdk.Driver = (*Driver)(nil)

func (d *Driver) log() *slog.Logger {
	if d.Log != nil {
		return d.Log
	}
	return slog.Default()
}

// Capabilities: resizable, idempotent creates, listable.
func (d *Driver) Capabilities(context.Context) (driversdk.Capabilities, error) {
	return driversdk.Capabilities{Resizable: true, IdempotencyTokens: true, Listable: true}, nil
}

// ValidateProfile checks the provider config and the profile.
func (d *Driver) ValidateProfile(_ context.Context, p driversdk.Provider, profile json.RawMessage) error {
	c, err := ParseConfig(p.Config)
	if err != nil {
		return err
	}
	_, err = ParseProfile(profile, c)
	return err
}

// session is one call's client and settings.
type session struct {
	api  *deckapi.Client
	cfg  Config
	prov driversdk.Provider
	log  *slog.Logger
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
	return &session{cfg: cfg, prov: p, log: d.log(), api: &deckapi.Client{
		BaseURL: cfg.Endpoint, RetryBase: cfg.RetryBase, UserAgent: "soul-cloud-nubes/" + d.Version,
		Token: func(context.Context) (string, error) { return tok, nil },
	}}, nil
}

// uidShape is a deck-api uid.
var uidShape = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// tags are the keeper's tags of an instance, kept in its description.
type tags map[string]string

const tagPrefix = "soulstack"

func (t tags) String() string {
	keys := make([]string, 0, len(t))
	for k := range t {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := tagPrefix
	for _, k := range keys {
		out += " " + k + "=" + t[k]
	}
	return out
}

// tagsOf reads the tags of a description; nil when it holds none.
func tagsOf(descr string) tags {
	f := strings.Fields(descr)
	if len(f) == 0 || f[0] != tagPrefix {
		return nil
	}
	t := tags{}
	for _, kv := range f[1:] {
		if k, v, ok := strings.Cut(kv, "="); ok {
			t[k] = v
		}
	}
	return t
}

// The tag keys of a description, and the driversdk tags they are.
var tagKeys = map[string]string{"keeper": driversdk.TagKeeper, "request": driversdk.TagRequestID, "run": driversdk.TagRunID}

// Create makes req.Count VMs, adopting those a previous attempt of the
// same request made.
func (d *Driver) Create(ctx context.Context, req driversdk.CreateRequest) ([]driversdk.VM, error) {
	s, err := d.session(req.Provider)
	if err != nil {
		return nil, err
	}
	prof, err := ParseProfile(req.Profile, s.cfg)
	if err != nil {
		return nil, err
	}
	have, err := s.byIndex(ctx, req.RequestID)
	if err != nil {
		return nil, err
	}
	uids := make([]string, req.Count)
	var made []string
	for i := range uids {
		if uids[i] = have[i]; uids[i] != "" {
			continue
		}
		uid, err := s.createVM(ctx, req, prof, i)
		if uid != "" {
			made = append(made, uid)
		}
		if err != nil {
			return nil, s.undo(ctx, made, err)
		}
		uids[i] = uid
	}
	vms := make([]driversdk.VM, len(uids))
	for i, uid := range uids {
		if vms[i], err = s.waitRunning(ctx, uid); err != nil {
			return nil, s.undo(ctx, made, err)
		}
	}
	return vms, nil
}

// byIndex maps the index of each instance made for request to its uid.
func (s *session) byIndex(ctx context.Context, request string) (map[int]string, error) {
	insts, err := s.instances(ctx, map[string]string{driversdk.TagRequestID: request, driversdk.TagKeeper: s.prov.KeeperID})
	if err != nil {
		return nil, err
	}
	out := map[int]string{}
	for _, in := range insts {
		if i, err := strconv.Atoi(tagsOf(in.Description)["index"]); err == nil {
			out[i] = in.UID
		}
	}
	return out, nil
}

// vmName is VM i's display name, its FQDN: the name the keeper
// predicted, or soulstack-<hash of the request id>-<i> with the
// provider's FQDN suffix (a request id is no DNS label).
func vmName(req driversdk.CreateRequest, suffix string, i int) string {
	if len(req.Names) == req.Count && req.Names[i] != "" {
		return strings.TrimSuffix(req.Names[i], ".")
	}
	sum := sha256.Sum256([]byte(req.RequestID))
	name := fmt.Sprintf("soulstack-%s-%d", hex.EncodeToString(sum[:6]), i)
	if suffix = strings.Trim(suffix, "."); suffix != "" {
		name += "." + suffix
	}
	return name
}

// createVM orders VM i of req and runs its create to the end; it returns
// the instance's uid once it exists, whatever happens after.
func (s *session) createVM(ctx context.Context, req driversdk.CreateRequest, p Profile, i int) (string, error) {
	name := vmName(req, s.prov.FQDNSuffix, i)
	t := tags{"keeper": s.prov.KeeperID, "request": req.RequestID, "run": req.RunID, "index": strconv.Itoa(i)}
	uid, err := s.api.CreateInstance(ctx, deckapi.ServiceVM, name, t.String())
	if err != nil {
		return "", apiError("create the instance of "+name, err)
	}
	values := map[string]string{
		"vappUid": p.VAppUID, "vmName": strings.SplitN(name, ".", 2)[0], "vmCpu": strconv.Itoa(p.CPUs), "vmRam": strconv.Itoa(p.MemoryGB),
		"imageVm": p.Image, "ipSpaceName": "no-needed", "accessIpList": jsonList(p.AllowedIPs), "accessPortList": jsonList(p.AllowedPorts),
		"userLogin": p.User, "needAddZabbixTemplate": "false",
	}
	if p.DiskGB > 0 {
		values["vmDisk"] = strconv.Itoa(p.DiskGB)
	}
	if p.IPSpace != "" {
		values["ipSpaceName"] = p.IPSpace
	}
	if i < len(req.Userdata) {
		values["cloudInit"] = req.Userdata[i]
	}
	if len(req.AuthorizedKeys) > 0 {
		values["userPublicKey"] = strings.TrimSpace(req.AuthorizedKeys[0])
	}
	return uid, s.operate(ctx, uid, deckapi.OpCreate, values)
}

func jsonList[T any](l []T) string {
	if len(l) == 0 {
		return "[]"
	}
	b, _ := json.Marshal(l)
	return string(b)
}

// operate runs operation op on instance uid with values for its
// parameters (the others keep their defaults) and waits for its end.
func (s *session) operate(ctx context.Context, uid, op string, values map[string]string) error {
	opUID, err := s.api.StartOperation(ctx, uid, op)
	if err != nil {
		return apiError(op+" "+uid, err)
	}
	o, err := s.api.Operation(ctx, opUID)
	if err != nil {
		return apiError(op+" "+uid, err)
	}
	for _, p := range o.Params {
		v, ok := values[p.Name]
		if !ok || (v == p.Value && p.UID != "") {
			continue
		}
		if err := s.api.SetParam(ctx, opUID, p, v); err != nil {
			return apiError(fmt.Sprintf("%s %s: parameter %s", op, uid, p.Name), err)
		}
	}
	if len(o.Params) > 0 {
		if err := s.api.Validate(ctx, opUID); err != nil {
			return apiError(op+" "+uid+": validation", err)
		}
	}
	if err := s.api.Run(ctx, opUID); err != nil {
		return apiError(op+" "+uid, err)
	}
	return s.wait(ctx, op, uid, opUID)
}

// wait polls an operation until it finishes.
func (s *session) wait(ctx context.Context, op, uid, opUID string) error {
	for {
		o, err := s.api.Operation(ctx, opUID)
		if err != nil && ctx.Err() != nil {
			return driversdk.Errorf(driversdk.CodeDriverTimeout, "the %s operation %s of instance %s had not finished by the call's deadline", op, opUID, uid)
		}
		if err != nil {
			return apiError(op+" "+uid, err)
		}
		if o.Finished != nil {
			if o.Successful != nil && *o.Successful {
				return nil
			}
			if op == deckapi.OpDelete && strings.Contains(o.ErrorLog+stagesText(o.Stages), DeletedMessage) {
				return nil
			}
			return driversdk.Errorf(CodeOperationFailed, "the %s operation %s of instance %s failed: %s%s", op, opUID, uid, o.ErrorLog, stagesText(o.Stages))
		}
		if err := deckapi.Sleep(ctx, s.cfg.PollInterval); err != nil {
			return driversdk.Errorf(driversdk.CodeDriverTimeout, "the %s operation %s of instance %s had not finished by the call's deadline", op, opUID, uid)
		}
	}
}

func stagesText(stages []deckapi.Stage) string {
	var out []string
	for _, st := range stages {
		ok := "running"
		if st.Successful != nil {
			ok = map[bool]string{true: "ok", false: "failed"}[*st.Successful]
		}
		out = append(out, fmt.Sprintf("%s %s %s", st.Name, ok, st.Message))
	}
	if len(out) == 0 {
		return ""
	}
	return " (stages: " + strings.Join(out, "; ") + ")"
}

// waitRunning polls an instance until it runs with an address.
func (s *session) waitRunning(ctx context.Context, uid string) (driversdk.VM, error) {
	status := "not read yet"
	for {
		in, err := s.api.Instance(ctx, uid)
		if err != nil && ctx.Err() != nil {
			return driversdk.VM{}, driversdk.Errorf(CodeNotRunning, "instance %s was still %q at the call's deadline", uid, status)
		}
		if err != nil {
			return driversdk.VM{}, apiError("read instance "+uid, err)
		}
		status = in.ExplainedStatus
		st := strings.ToLower(in.ExplainedStatus)
		if strings.Contains(st, "error") || strings.Contains(st, "fail") || strings.Contains(st, "не удалось") {
			return driversdk.VM{}, driversdk.Errorf(CodeNotRunning, "instance %s is %q", uid, in.ExplainedStatus)
		}
		if running(in.ExplainedStatus) {
			return s.vmOf(in)
		}
		if err := deckapi.Sleep(ctx, s.cfg.PollInterval); err != nil {
			return driversdk.VM{}, driversdk.Errorf(CodeNotRunning, "instance %s was still %q at the call's deadline", uid, in.ExplainedStatus)
		}
	}
}

// vmOf is a running instance as the keeper sees a VM.
func (s *session) vmOf(in deckapi.Instance) (driversdk.VM, error) {
	addr, _ := in.State.Params[s.cfg.AddressKey].(string)
	if addr == "" {
		return driversdk.VM{}, &driversdk.Error{Code: CodeNoAddress, Field: "config.address_key",
			Message: fmt.Sprintf("running instance %s has no address under state.params[%q] (its keys: %s)", in.UID, s.cfg.AddressKey, paramKeys(in))}
	}
	vm := listed(in)
	vm.PrimaryIP, vm.PrivateIP = addr, addr
	vm.Addresses = []driversdk.Address{{IP: addr, Kind: driversdk.AddressPrivate}}
	return vm, nil
}

// running reports whether an instance's explained status is one of a
// running VM.
func running(status string) bool {
	st := strings.ToLower(status)
	return st == "running" || st == "active" || st == "deployed"
}

// listed is an instance as a VM without its address: its attributes
// (the API's status; state, running or the status, which cloud drift
// reads; the size and image; the login the keeper's key was given to,
// the profile's user, as ssh_user) and the keeper's tags.
func listed(in deckapi.Instance) driversdk.VM {
	state := "running"
	if !running(in.ExplainedStatus) {
		state = strings.ToLower(in.ExplainedStatus)
	}
	vm := driversdk.VM{ID: in.UID, FQDN: in.DisplayName, Tags: map[string]string{},
		Attributes: map[string]any{"status": in.ExplainedStatus, "state": state,
			"cpus": in.State.Params["vmCpu"], "memory_gb": in.State.Params["vmRam"], "image": in.State.Params["imageVm"]}}
	if u, _ := in.State.Params["userLogin"].(string); u != "" {
		vm.Attributes["ssh_user"] = u
	}
	for k, v := range tagsOf(in.Description) {
		if tag, ok := tagKeys[k]; ok {
			vm.Tags[tag] = v
		}
	}
	return vm
}

func paramKeys(in deckapi.Instance) string {
	var keys []string
	for k := range in.State.Params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return strings.Join(keys, ", ")
}

// undo deletes the instances made for a create that failed and returns
// cause, naming those it could not delete.
func (s *session) undo(ctx context.Context, made []string, cause error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Minute)
	defer cancel()
	var left []string
	for _, uid := range made {
		if err := s.operate(ctx, uid, deckapi.OpDelete, nil); err != nil && !errors.Is(err, deckapi.ErrNotFound) {
			left = append(left, uid)
			s.log.Warn("could not delete an instance of a failed create", "instance", uid, "err", err)
		}
	}
	if len(left) == 0 {
		return cause
	}
	var de *driversdk.Error
	if errors.As(cause, &de) {
		return &driversdk.Error{Code: de.Code, Field: de.Field, Message: de.Message + "; instances left behind: " + strings.Join(left, ", ")}
	}
	return fmt.Errorf("%w; instances left behind: %s", cause, strings.Join(left, ", "))
}

// instances reads every VM instance carrying every tag in want.
func (s *session) instances(ctx context.Context, want map[string]string) ([]deckapi.Instance, error) {
	var out []deckapi.Instance
	for page := 1; ; page++ {
		refs, err := s.api.Instances(ctx, page, 100)
		if err != nil {
			return nil, apiError("list instances", err)
		}
		if len(refs) == 0 {
			return out, nil
		}
		for _, r := range refs {
			if r.ServiceID != deckapi.ServiceVM {
				continue
			}
			in, err := s.api.Instance(ctx, r.UID)
			if errors.Is(err, deckapi.ErrNotFound) {
				continue
			}
			if err != nil {
				return nil, apiError("read instance "+r.UID, err)
			}
			if matches(tagsOf(in.Description), want) {
				out = append(out, in)
			}
		}
	}
}

func matches(t tags, want map[string]string) bool {
	if t == nil {
		return false
	}
	for k, tag := range tagKeys {
		if v, ok := want[tag]; ok && t[k] != v {
			return false
		}
	}
	return true
}

// owned reads the instances ids name, refusing (before anything changes)
// an id that is not a uid and an instance of another deployment; gone
// instances are left out.
func (s *session) owned(ctx context.Context, ids []string) ([]deckapi.Instance, error) {
	var out []deckapi.Instance
	for _, id := range ids {
		if !uidShape.MatchString(id) {
			return nil, driversdk.Errorf(driversdk.CodeVMNotFound, "%q is not a deck-api instance uid", id)
		}
		in, err := s.api.Instance(ctx, id)
		if errors.Is(err, deckapi.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, apiError("read instance "+id, err)
		}
		if t := tagsOf(in.Description); t == nil || t["keeper"] != s.prov.KeeperID {
			return nil, driversdk.Errorf(driversdk.CodeNotOwned, "instance %s was not made by this keeper deployment", id)
		}
		out = append(out, in)
	}
	return out, nil
}

// Destroy deletes (or suspends) the VMs; those already gone succeed.
func (d *Driver) Destroy(ctx context.Context, req driversdk.DestroyRequest) error {
	s, err := d.session(req.Provider)
	if err != nil {
		return err
	}
	insts, err := s.owned(ctx, req.VMIDs)
	if err != nil {
		return err
	}
	for _, in := range insts {
		if s.cfg.Destroy == DestroySuspend && strings.EqualFold(in.Status, "suspended") {
			continue
		}
		if err := s.operate(ctx, in.UID, s.cfg.Destroy, nil); err != nil && !errors.Is(err, deckapi.ErrNotFound) {
			return err
		}
	}
	return nil
}

// Resize changes the VMs' CPUs and memory with a modify operation.
func (d *Driver) Resize(ctx context.Context, req driversdk.ResizeRequest) ([]driversdk.ResizeResult, error) {
	s, err := d.session(req.Provider)
	if err != nil {
		return nil, err
	}
	var spec struct {
		CPUs     int `json:"cpus"`
		MemoryGB int `json:"memory_gb"`
	}
	if err := json.Unmarshal(req.Spec, &spec); err != nil || (spec.CPUs <= 0 && spec.MemoryGB <= 0) {
		return nil, invalid("spec", "a resize needs cpus and/or memory_gb")
	}
	insts, err := s.owned(ctx, req.VMIDs)
	if err != nil {
		return nil, err
	}
	if len(insts) != len(req.VMIDs) {
		return nil, driversdk.Errorf(driversdk.CodeVMNotFound, "some of %v are gone", req.VMIDs)
	}
	var out []driversdk.ResizeResult
	for _, in := range insts {
		values := map[string]string{}
		if spec.CPUs > 0 && fmt.Sprint(in.State.Params["vmCpu"]) != strconv.Itoa(spec.CPUs) {
			values["vmCpu"] = strconv.Itoa(spec.CPUs)
		}
		if spec.MemoryGB > 0 && fmt.Sprint(in.State.Params["vmRam"]) != strconv.Itoa(spec.MemoryGB) {
			values["vmRam"] = strconv.Itoa(spec.MemoryGB)
		}
		if len(values) == 0 {
			out = append(out, driversdk.ResizeResult{VMID: in.UID, Unchanged: true})
			continue
		}
		if err := s.operate(ctx, in.UID, deckapi.OpModify, values); err != nil {
			return nil, err
		}
		out = append(out, driversdk.ResizeResult{VMID: in.UID, CausedDowntime: true})
	}
	return out, nil
}

// List lists the VMs carrying req.Tags.
func (d *Driver) List(ctx context.Context, req driversdk.ListRequest) ([]driversdk.VM, error) {
	s, err := d.session(req.Provider)
	if err != nil {
		return nil, err
	}
	insts, err := s.instances(ctx, req.Tags)
	if err != nil {
		return nil, err
	}
	var out []driversdk.VM
	for _, in := range insts {
		addr, _ := in.State.Params[s.cfg.AddressKey].(string)
		vm, err := s.vmOf(in)
		if addr == "" || err != nil {
			// Not running (yet, or any more): listed without an address.
			vm = listed(in)
		}
		out = append(out, vm)
	}
	return out, nil
}

// apiError is a deck-api failure as a driver error with a stable code.
func apiError(what string, err error) error {
	var de *driversdk.Error
	if errors.As(err, &de) {
		return err
	}
	switch {
	case errors.Is(err, deckapi.ErrUnauthorized):
		return driversdk.Errorf(CodeAuthFailed, "%s: the deck-api refused the token (401): it has expired; copy a new one from the Nubes portal", what)
	case errors.Is(err, deckapi.ErrNotFound):
		return fmt.Errorf("%s: %w", what, err)
	case errors.Is(err, context.DeadlineExceeded):
		return driversdk.Errorf(driversdk.CodeDriverTimeout, "%s: %v", what, err)
	}
	return driversdk.Errorf(CodeAPI, "%s: %v", what, err)
}
