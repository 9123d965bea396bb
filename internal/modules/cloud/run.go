package cloud

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/soulstack/soulstack/driversdk"
	"github.com/soulstack/soulstack/internal/module"
	"github.com/soulstack/soulstack/internal/secret"
	"github.com/soulstack/soulstack/internal/store"
)

// DefaultMaxCount bounds count per create unless the provider's config
// sets max_count.
const DefaultMaxCount = 20

// Registry is the part of the keeper's store the cloud states use.
type Registry interface {
	ProviderGet(ctx context.Context, name string) (store.Provider, error)
	ProfileGet(ctx context.Context, name string) (store.Profile, error)
	SoulGet(ctx context.Context, sid string) (store.Soul, error)
	CloudRequestCreate(ctx context.Context, r store.CloudRequest) error
	CloudRequestFail(ctx context.Context, requestID, msg string) error
	CloudResize(ctx context.Context, p store.CloudResizeParams) (map[string]store.Size, error)
	CloudResizeUndo(ctx context.Context, provider string, before map[string]store.Size) error
	CloudVMsCreated(ctx context.Context, provider string, vmIDs []string) (map[string]string, error)
	CloudProvision(ctx context.Context, p store.CloudProvisionParams) error
	CloudDestroy(ctx context.Context, p store.CloudDestroyParams) (store.CloudCascade, error)
	AuditRecord(ctx context.Context, p store.AuditParams) error
}

// Services is what the cloud states need from the keeper, given to them
// once when the keeper is built (module.Provisioner); which run and step a
// call serves comes with the call (module.RunInfo).
type Services struct {
	// Registry is the keeper's store, as far as the states use it.
	Registry Registry
	// Driver returns the provider's driver, through the PluginHost.
	Driver func(ctx context.Context, name string) (driversdk.Driver, error)
	// Credentials checks that a provider may be used as configured and
	// resolves its credentials_ref, in the provider's own project, for one
	// call; nil credentials for a provider without a reference.
	Credentials func(ctx context.Context, p store.Provider) ([]byte, error)
	// AuthorizedKey returns the keeper's SSH public key of a project
	// (authorized_keys line): what that project's new VMs trust.
	AuthorizedKey func(ctx context.Context, project string) (string, error)
	// Userdata renders keeper.yml's cloud_init template for one VM.
	Userdata func(u UserdataVars) (string, error)
	// BootstrapTTL is how long a bootstrap token lives once its VM exists.
	BootstrapTTL time.Duration
	// KeeperID is the keeper deployment's id (store.DeploymentID), passed
	// to the driver with every call as Provider.KeeperID.
	KeeperID string
	// CheckSeed validates a seed's scenario text with its input and
	// returns the problems found, each as "location: message". Nil: seeds
	// are stored unchecked (they are checked again when their run is
	// created).
	CheckSeed func(name, text string, input map[string]any) (secret, problems []string)
	// JoinsByItself reports whether a self_onboard VM of driver runs the
	// agent's join from its userdata. Such a soul's SSH host key is
	// pinned when it joins, and SSH waits for that
	// (store.Connection.AwaitJoin). Nil, or when the driver reported the
	// VM's host key: nothing waits.
	JoinsByItself func(driver string) bool
}

// UserdataVars are the values a cloud_init template sees.
type UserdataVars struct {
	SID           string // the predicted FQDN, empty when not known in advance
	Index         int    // 1-based position in the batch
	Token         string // the VM's plain bootstrap token
	AuthorizedKey string
	// Driver is the provider's driver: the keeper advertises the address
	// VMs of that driver reach it at.
	Driver string
}

// errUnprovisioned fails a cloud state run without the keeper's services.
var errUnprovisioned = &module.Error{Code: "module.keeper_services_unavailable", Message: "the cloud states run only inside a keeper, which provisions them"}

// driverError turns a driver failure into a module error with its code.
func driverError(op string, err error) error {
	var de *driversdk.Error
	if errors.As(err, &de) {
		msg := de.Message
		if de.Field != "" {
			msg = de.Field + ": " + msg
		}
		return &module.Error{Code: de.Code, Message: op + ": " + msg, Err: err}
	}
	var me *module.Error
	if errors.As(err, &me) {
		return err
	}
	return &module.Error{Code: "driver.failed", Message: op + ": " + err.Error(), Err: err}
}

// sizeOf is what one VM of a profile spec takes of its project's vCPU and
// memory quotas: its cpus (or vcpus) and memory_mb, 0 for what the spec
// does not state (a cloud's instance type counts as a VM alone).
func sizeOf(spec json.RawMessage) (vcpus, memoryMB int) {
	var sz struct {
		CPUs     any `json:"cpus"`
		VCPUs    any `json:"vcpus"`
		MemoryMB any `json:"memory_mb"`
	}
	_ = json.Unmarshal(spec, &sz) // a spec of other shapes states neither
	cpus := whole(sz.CPUs)
	if cpus == 0 {
		cpus = whole(sz.VCPUs)
	}
	return cpus, whole(sz.MemoryMB)
}

// whole is a size field as quotas count it: a number (or a numeric
// string, as ${ } interpolation makes) rounded up, so that half a vCPU
// counts as one and never as none; anything else 0.
func whole(v any) int {
	var f float64
	switch x := v.(type) {
	case float64:
		f = x
	case string:
		var err error
		if f, err = strconv.ParseFloat(strings.TrimSpace(x), 64); err != nil {
			return 0
		}
	default:
		return 0
	}
	if f <= 0 || math.IsNaN(f) || f > math.MaxInt32 {
		return 0
	}
	return int(math.Ceil(f))
}

// provider loads the provider, its driver and its credentials.
func provider(ctx context.Context, h *Services, run module.RunInfo, name string) (store.Provider, driversdk.Driver, driversdk.Provider, error) {
	p, err := h.Registry.ProviderGet(ctx, name)
	if err == nil && !run.Sees(p.Project, p.SharedWith) {
		// Another project's provider, not shared with the run's: as if it
		// did not exist.
		err = &store.Error{Err: store.ErrNotFound, Kind: "provider", Key: name}
	}
	if errors.Is(err, store.ErrNotFound) {
		return p, nil, driversdk.Provider{}, &module.Error{Code: "provider.not_found", Message: fmt.Sprintf("provider %q is not registered", name)}
	}
	if err != nil {
		return p, nil, driversdk.Provider{}, err
	}
	d, err := h.Driver(ctx, p.Driver)
	if err != nil {
		return p, nil, driversdk.Provider{}, driverError("start driver "+p.Driver, err)
	}
	dp := driversdk.Provider{Name: p.Name, Region: p.Region, FQDNSuffix: p.FQDNSuffix, Config: DriverConfig(p.Config), KeeperID: h.KeeperID}
	if dp.Credentials, err = h.Credentials(ctx, p); err != nil {
		code := "provider.credentials_unavailable"
		switch {
		case errors.Is(err, secret.ErrEndpointNotAllowed):
			code = "provider.endpoint_not_allowed"
		case errors.Is(err, secret.ErrOutOfReach):
			code = "provider.credentials_out_of_reach"
		}
		return p, nil, dp, &module.Error{Code: code, Message: fmt.Sprintf("provider %q cannot be used: %v", name, err)}
	}
	return p, d, dp, nil
}

// spec resolves a profile param: a registered profile's name (of the same
// provider) or an inline map.
func spec(ctx context.Context, h *Services, run module.RunInfo, provider string, v any) (json.RawMessage, error) {
	switch x := v.(type) {
	case nil:
		return json.RawMessage(`{}`), nil
	case string:
		pr, err := h.Registry.ProfileGet(ctx, x)
		if err == nil && !run.Sees(pr.Project, pr.SharedWith) {
			err = &store.Error{Err: store.ErrNotFound, Kind: "profile", Key: x}
		}
		if errors.Is(err, store.ErrNotFound) {
			return nil, &module.Error{Code: "profile.not_found", Message: fmt.Sprintf("profile %q is not registered", x)}
		}
		if err != nil {
			return nil, err
		}
		if pr.Provider != provider {
			return nil, &module.Error{Code: "profile.provider_mismatch", Message: fmt.Sprintf("profile %q belongs to provider %q, not %q", x, pr.Provider, provider)}
		}
		return pr.Spec, nil
	case map[string]any:
		b, err := json.Marshal(x)
		return b, err
	}
	return nil, &module.Error{Code: "step.params_invalid", Message: fmt.Sprintf("profile must be a profile name or a map, got %s", module.Describe(v))}
}

// keeperKeys are the provider config keys the keeper itself reads; the
// driver never sees them.
var keeperKeys = []string{"max_count", "address"}

// DriverConfig returns a provider's config without the keys the keeper
// reads itself (max_count, address), as the driver gets it.
func DriverConfig(raw json.RawMessage) json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil || m == nil {
		return raw
	}
	for _, k := range keeperKeys {
		delete(m, k)
	}
	b, err := json.Marshal(m)
	if err != nil {
		return raw
	}
	return b
}

func maxCount(p store.Provider) int {
	var cfg struct {
		MaxCount int `json:"max_count"`
	}
	if json.Unmarshal(p.Config, &cfg) == nil && cfg.MaxCount > 0 {
		return cfg.MaxCount
	}
	return DefaultMaxCount
}

func randomID(prefix string, n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// newBootstrapToken returns a plain one-time token and its stored hash.
func newBootstrapToken() (plain, hash string) {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	plain = "sbt_" + base64.RawURLEncoding.EncodeToString(b)
	sum := sha256.Sum256([]byte(plain))
	return plain, hex.EncodeToString(sum[:])
}

// attempt is what a step knows of the VMs it acted on, for the audit event
// of its failure.
type attempt struct {
	requestID string
	vmIDs     []string
	sids      []string
}

// failed writes the cloud.provisioned event of a failed step (outcome
// failed, the error's code, the provider, the state and the VMs known) as
// the run's creator, and returns err. The event never holds the error's
// message, which may carry a driver's text; the run's step has it, masked.
// When the event cannot be written either, the step's error says so.
func failed(ctx context.Context, h *Services, run module.RunInfo, state, provider string, a attempt, err error) error {
	vmIDs := a.vmIDs
	if vmIDs == nil {
		vmIDs = []string{}
	}
	payload := map[string]any{"action": state, "outcome": "failed", "error_code": module.Code(err), "provider": provider,
		"vm_ids": vmIDs, "run_id": run.ID, "step": run.Step}
	if a.sids != nil {
		payload["sids"] = a.sids
	}
	if a.requestID != "" {
		payload["request_id"] = a.requestID
	}
	object := "provider/" + provider
	if provider == "" {
		object = "run/" + run.ID // the step failed before its params named one
	}
	aerr := h.Registry.AuditRecord(context.WithoutCancel(ctx), store.AuditParams{Actor: store.Actor(run.Creator), Action: "cloud.provisioned",
		Object: object, Payload: payload, Project: run.Project})
	if aerr == nil {
		return err
	}
	return &module.Error{Code: module.Code(err), Message: err.Error() + "; the cloud.provisioned event of this failure could not be written either: " + aerr.Error(), Err: err}
}

// AuditFailure writes the cloud.provisioned event of a step that failed
// before it ran (module.FailureAuditor): its params did not evaluate, or
// its creator may no longer create VMs.
func (m *Created) AuditFailure(ctx context.Context, run module.RunInfo, err error) error {
	return auditEarly(ctx, m.svc, run, "created", err)
}

// AuditFailure is Created's, for destroy steps.
func (m *Destroyed) AuditFailure(ctx context.Context, run module.RunInfo, err error) error {
	return auditEarly(ctx, m.svc, run, "destroyed", err)
}

// AuditFailure is Created's, for resize steps.
func (m *Resized) AuditFailure(ctx context.Context, run module.RunInfo, err error) error {
	return auditEarly(ctx, m.svc, run, "resized", err)
}

func auditEarly(ctx context.Context, h *Services, run module.RunInfo, state string, err error) error {
	if h == nil {
		return err // unprovisioned: nothing to audit into
	}
	return failed(ctx, h, run, state, "", attempt{}, err)
}

// Run asks the provider for count VMs and registers each as a pending soul
// with a bootstrap token. It is never idempotent: every run makes new VMs.
// Every outcome, failures included, is audited as cloud.provisioned.
func (m *Created) Run(ctx context.Context, run module.RunInfo, raw json.RawMessage, _ module.Target) (module.Result, error) {
	var p CreatedParams
	if err := module.DecodeParams(raw, &p); err != nil {
		return module.Result{}, err
	}
	h := m.svc
	if h == nil {
		return module.Result{}, errUnprovisioned
	}
	var a attempt
	res, err := p.run(ctx, run, h, &a)
	if err != nil {
		return res, failed(ctx, h, run, "created", p.Provider, a, err)
	}
	return res, nil
}

func (p CreatedParams) run(ctx context.Context, run module.RunInfo, h *Services, a *attempt) (module.Result, error) {
	c, err := p.prepare(ctx, h, run)
	if err != nil {
		return module.Result{}, err
	}
	if err := checkSeeds(h, p.Seeds, c.sampleSID(p.Name)); err != nil {
		return module.Result{}, err
	}
	if c.authorizedKey, err = h.AuthorizedKey(ctx, run.Project); err != nil {
		return module.Result{}, &module.Error{Code: "cloud.keeper_key_unavailable", Message: fmt.Sprintf("the keeper's SSH key of project %s: %v", run.Project, err)}
	}
	c.mintTokens(run, p.Count)
	if err := c.renderUserdata(p, h); err != nil {
		return module.Result{}, err
	}

	requestID := randomID("req_", 12)
	a.requestID = requestID
	vcpus, memory := sizeOf(c.profile)
	err = h.Registry.CloudRequestCreate(ctx, store.CloudRequest{RequestID: requestID, RunID: run.ID, Step: run.Step, Provider: c.prov.Name, Count: p.Count,
		Project: run.Project, VCPUs: vcpus, MemoryMB: memory})
	var qe *store.QuotaError
	if errors.As(err, &qe) {
		return module.Result{}, &module.Error{Code: "quota.exceeded", Message: qe.Error() + "; no VM was asked for", Err: err}
	}
	if err != nil {
		return module.Result{}, err
	}
	vms, err := c.driver.Create(ctx, driversdk.CreateRequest{
		Provider: c.dp, RequestID: requestID, RunID: run.ID, Profile: c.profile, Count: p.Count,
		Names: c.names, Userdata: c.userdata, AuthorizedKeys: []string{c.authorizedKey},
	})
	created := time.Now()
	if err != nil {
		_ = h.Registry.CloudRequestFail(context.WithoutCancel(ctx), requestID, err.Error())
		return module.Result{Changed: true}, driverError("create", err)
	}
	for _, vm := range vms {
		a.vmIDs = append(a.vmIDs, vm.ID)
	}
	reg, err := c.register(p, h, run, vms, created)
	if err == nil {
		err = h.Registry.CloudProvision(ctx, store.CloudProvisionParams{
			RequestID: requestID, Souls: reg.souls, Tokens: reg.tokens, Seeds: reg.seeds, Actor: store.Actor(run.Creator),
			Audit: map[string]any{"outcome": "ok", "changed": true, "provider": c.prov.Name, "run_id": run.ID, "step": run.Step, "count": len(vms)},
		})
		if err != nil {
			err = &module.Error{Code: "cloud.registry_failed", Message: "the VMs were created but could not be registered: " + err.Error()}
		}
	}
	if err != nil {
		// The VMs exist but are not souls: tell where to find them.
		msg := err.Error()
		_ = h.Registry.CloudRequestFail(context.WithoutCancel(ctx), requestID, msg)
		return module.Result{Changed: true}, &module.Error{Code: module.Code(err), Message: msg + fmt.Sprintf("; the VMs are tagged with request %s: soulctl cloud orphans --provider %s lists them", requestID, c.prov.Name)}
	}
	return module.Result{Changed: true, Output: map[string]any{"hosts": reg.hosts, "count": len(vms), "vm_ids": reg.vmIDs, "action": "created"}}, nil
}

// creation is what a create decides before it asks the driver: the
// provider and its driver, the checked profile, the address mode, the
// predicted names of a self_onboard batch, and each VM's bootstrap token
// and userdata.
type creation struct {
	prov     store.Provider
	driver   driversdk.Driver
	dp       driversdk.Provider
	profile  json.RawMessage
	mode     string   // address mode (addressSetting)
	names    []string // predicted SIDs; nil unless self_onboard
	plain    []string // bootstrap tokens, in clear
	hashes   []string // and as stored
	userdata []string
	// authorizedKey is the run's project's keeper SSH public key.
	authorizedKey string
}

// prepare loads the provider, checks count and profile with the driver,
// and predicts the names of a self_onboard batch (none may be taken).
func (p *CreatedParams) prepare(ctx context.Context, h *Services, run module.RunInfo) (*creation, error) {
	if p.Count < 1 {
		p.Count = 1
	}
	var c creation
	var err error
	if c.prov, c.driver, c.dp, err = provider(ctx, h, run, p.Provider); err != nil {
		return nil, err
	}
	if max := maxCount(c.prov); p.Count > max {
		return nil, &module.Error{Code: "cloud.count_exceeded", Message: fmt.Sprintf("count %d is above provider %q's max_count %d", p.Count, c.prov.Name, max)}
	}
	profile, err := spec(ctx, h, run, c.prov.Name, p.Profile)
	if err != nil {
		return nil, err
	}
	if c.mode, c.profile, err = addressSetting(c.prov.Name, c.prov.Config, profile); err != nil {
		return nil, err
	}
	if err := c.driver.ValidateProfile(ctx, c.dp, c.profile); err != nil {
		return nil, driverError("validate profile", err)
	}
	if !p.SelfOnboard {
		return &c, nil
	}
	if c.prov.FQDNSuffix == "" {
		return nil, &module.Error{Code: "cloud.fqdn_suffix_missing", Message: fmt.Sprintf("self_onboard needs provider %q to have an fqdn_suffix", c.prov.Name)}
	}
	for i := 1; i <= p.Count; i++ {
		sid := fmt.Sprintf("%s-%d.%s", p.Name, i, c.prov.FQDNSuffix)
		if _, err := h.Registry.SoulGet(ctx, sid); err == nil {
			return nil, &module.Error{Code: "cloud.name_taken", Message: fmt.Sprintf("soul %q already exists; choose another name for the batch", sid)}
		}
		c.names = append(c.names, sid)
	}
	return &c, nil
}

// sampleSID is the first predicted SID, or what it would be: the sid the
// seeds are checked with.
func (c *creation) sampleSID(name string) string {
	if c.names != nil {
		return c.names[0]
	}
	return fmt.Sprintf("%s-1.%s", name, c.prov.FQDNSuffix)
}

// mintTokens makes each of the n VMs' one-time bootstrap token.
func (c *creation) mintTokens(run module.RunInfo, n int) {
	c.plain, c.hashes = make([]string, n), make([]string, n)
	for i := range c.plain {
		c.plain[i], c.hashes[i] = newBootstrapToken()
		// The plain token is in the step output by design (cloud-init
		// hands it to the VM); wherever else its text shows up, it is
		// masked.
		run.AddSecret(c.plain[i])
	}
}

// renderUserdata gives each VM its userdata: the keeper's cloud_init
// template for self_onboard and generate_userdata, else the step's own.
func (c *creation) renderUserdata(p CreatedParams, h *Services) error {
	switch {
	case p.SelfOnboard || p.GenerateUserdata:
		for i := 0; i < p.Count; i++ {
			sid := ""
			if c.names != nil {
				sid = c.names[i]
			}
			u, err := h.Userdata(UserdataVars{SID: sid, Index: i + 1, Token: c.plain[i], AuthorizedKey: c.authorizedKey, Driver: c.prov.Driver})
			if err != nil {
				return &module.Error{Code: "cloud.userdata_invalid", Message: "render cloud_init: " + err.Error()}
			}
			c.userdata = append(c.userdata, u)
		}
	case p.Userdata != "":
		for i := 0; i < p.Count; i++ {
			c.userdata = append(c.userdata, p.Userdata)
		}
	}
	return nil
}

// registration is what the registry stores for the created VMs, and the
// step's output of them.
type registration struct {
	souls  []store.Soul
	tokens []store.BootstrapToken
	seeds  []store.SoulSeed
	hosts  []any
	vmIDs  []string
}

// register turns the driver's VMs into souls with their bootstrap tokens
// (valid BootstrapTTL from created) and seeds; a VM that cannot become a
// soul (not the predicted name, no FQDN, no usable address) fails it.
func (c *creation) register(p CreatedParams, h *Services, run module.RunInfo, vms []driversdk.VM, created time.Time) (*registration, error) {
	if len(vms) != p.Count {
		return nil, &module.Error{Code: "driver.bad_answer", Message: fmt.Sprintf("the driver made %d VMs, %d were asked for", len(vms), p.Count)}
	}
	var sshUser struct {
		SSHUser string `json:"ssh_user"`
	}
	_ = json.Unmarshal(c.profile, &sshUser)
	r := &registration{souls: make([]store.Soul, len(vms)), tokens: make([]store.BootstrapToken, len(vms)), hosts: make([]any, len(vms)), vmIDs: make([]string, len(vms))}
	for i, vm := range vms {
		sid := strings.TrimSuffix(vm.FQDN, ".")
		if c.names != nil && sid != c.names[i] {
			return nil, &module.Error{Code: "driver.bad_answer", Message: fmt.Sprintf("VM %s is named %q, not the predicted %q", vm.ID, sid, c.names[i])}
		}
		if sid == "" {
			return nil, &module.Error{Code: "cloud.fqdn_missing", Message: fmt.Sprintf("VM %s has no FQDN, so it cannot become a soul", vm.ID)}
		}
		addr, err := chooseAddress(c.mode, vm)
		if err != nil {
			return nil, &module.Error{Code: module.Code(err), Message: err.Error()}
		}
		attrs, _ := json.Marshal(vm.Attributes)
		// A driver that reports the VM's SSH host key (attribute
		// ssh_host_key) lets the keeper pin it now instead of trusting
		// the first contact.
		hostKey, _ := vm.Attributes["ssh_host_key"].(string)
		// The login user: the profile's ssh_user, else the one the driver
		// reports (its default, such as a cloud image's cloud-init user),
		// else root.
		user := sshUser.SSHUser
		if user == "" {
			user, _ = vm.Attributes["ssh_user"].(string)
		}
		if user == "" {
			user = "root"
		}
		r.souls[i] = store.Soul{
			SID: sid, Provider: c.prov.Name, VMID: vm.ID, Address: addr, PrimaryIP: vm.PrimaryIP, Attributes: attrs, Project: run.Project,
			Connection: store.Connection{Transport: "ssh", User: user, Port: 22, HostKey: hostKey,
				AwaitJoin: p.SelfOnboard && hostKey == "" && joinsByItself(h, c.prov.Driver)},
		}
		r.tokens[i] = store.BootstrapToken{ID: randomID("bt_", 12), SID: sid, Hash: c.hashes[i], ExpiresAt: created.Add(h.BootstrapTTL)}
		for _, sd := range p.Seeds {
			in, _ := json.Marshal(sd.Input)
			if sd.Input == nil {
				in = []byte(`{}`)
			}
			r.seeds = append(r.seeds, store.SoulSeed{SID: sid, Scenario: sd.Scenario, Input: in, Secret: sd.secret, CreatedBy: run.Creator})
		}
		r.hosts[i] = map[string]any{"sid": sid, "vm_id": vm.ID, "address": addr, "primary_ip": vm.PrimaryIP,
			"public_ip": vm.PublicIP, "private_ip": vm.PrivateIP, "addresses": addressesOut(vm),
			"attributes": vm.Attributes, "bootstrap_token": c.plain[i]}
		r.vmIDs[i] = vm.ID
	}
	return r, nil
}

// Run destroys the VMs, then (only after the driver succeeded) runs the
// registry cascade in one transaction with the cloud.provisioned event.
// VMs a Listable driver no longer lists were already gone: the step
// changes only when a listed VM was destroyed or a registry row moved.
func (m *Destroyed) Run(ctx context.Context, run module.RunInfo, raw json.RawMessage, _ module.Target) (module.Result, error) {
	var p DestroyedParams
	if err := module.DecodeParams(raw, &p); err != nil {
		return module.Result{}, err
	}
	h := m.svc
	if h == nil {
		return module.Result{}, errUnprovisioned
	}
	res, err := p.run(ctx, run, h)
	if err != nil {
		return res, failed(ctx, h, run, "destroyed", p.Provider, attempt{vmIDs: p.VMIDs, sids: p.SIDs}, err)
	}
	return res, nil
}

func (p DestroyedParams) run(ctx context.Context, run module.RunInfo, h *Services) (module.Result, error) {
	prov, d, dp, err := provider(ctx, h, run, p.Provider)
	if err != nil {
		return module.Result{}, err
	}
	if err := checkPairing(ctx, h.Registry, run, prov.Name, p.VMIDs, p.SIDs); err != nil {
		return module.Result{}, err
	}
	live, gone, err := liveVMs(ctx, d, dp, p.VMIDs)
	if err != nil {
		return module.Result{}, err
	}
	if err := destroy(ctx, d, dp, p.VMIDs, live, gone); err != nil {
		return module.Result{}, driverError("destroy", err)
	}
	sids := p.SIDs
	if sids == nil {
		sids = []string{}
	}
	// The cascade's counters decide the rest of "changed"; the event
	// written in its transaction computes it from the same counters.
	c, err := h.Registry.CloudDestroy(ctx, store.CloudDestroyParams{Provider: prov.Name, VMIDs: p.VMIDs, SIDs: sids, Actor: store.Actor(run.Creator), Project: run.Project,
		Destroyed: live, AlreadyGone: gone, Audit: map[string]any{"outcome": "ok", "run_id": run.ID, "step": run.Step}})
	changed := len(live) > 0 || c.SoulsDestroyed+c.SeedsOrphaned+c.TokensBurned > 0
	if err != nil {
		return module.Result{Changed: len(live) > 0}, &module.Error{Code: "cloud.registry_failed",
			Message: "the VMs are gone at the provider, but the registry cascade and its cloud.provisioned event could not be written (nothing was recorded): " + err.Error(), Err: err}
	}
	return module.Result{Changed: changed, Output: map[string]any{
		"vm_ids": p.VMIDs, "already_gone": gone, "sids": sids, "souls_destroyed": c.SoulsDestroyed, "seeds_orphaned": c.SeedsOrphaned, "bootstraps_burned": c.TokensBurned, "action": "destroyed",
	}}, nil
}

// destroy asks the driver to destroy every VM of vmIDs, the ones already
// gone too: destroying a VM already gone succeeds by the driver contract,
// and a list that lags behind the provider must never leave a VM running.
// When the driver no longer knows some VM at all (vm.not_found) while its
// list lacked VMs too, those were gone: only the listed ones are asked for
// again.
func destroy(ctx context.Context, d driversdk.Driver, dp driversdk.Provider, vmIDs, live, gone []string) error {
	err := d.Destroy(ctx, driversdk.DestroyRequest{Provider: dp, VMIDs: vmIDs})
	if len(gone) == 0 || !errors.Is(err, &driversdk.Error{Code: driversdk.CodeVMNotFound}) {
		return err
	}
	if len(live) == 0 {
		return nil
	}
	return d.Destroy(ctx, driversdk.DestroyRequest{Provider: dp, VMIDs: live})
}

// liveVMs splits vmIDs into those the provider still lists and those
// already gone. A driver that cannot list its VMs cannot tell: every VM
// counts as live.
func liveVMs(ctx context.Context, d driversdk.Driver, dp driversdk.Provider, vmIDs []string) (live, gone []string, err error) {
	gone = []string{}
	caps, err := d.Capabilities(ctx)
	if err != nil {
		return nil, nil, driverError("capabilities", err)
	}
	if !caps.Listable {
		return vmIDs, gone, nil
	}
	vms, err := d.List(ctx, driversdk.ListRequest{Provider: dp})
	if err != nil {
		return nil, nil, driverError("list", err)
	}
	there := map[string]bool{}
	for _, vm := range vms {
		there[vm.ID] = true
	}
	seen := map[string]bool{}
	for _, id := range vmIDs {
		if seen[id] {
			continue
		}
		seen[id] = true
		if there[id] {
			live = append(live, id)
		} else {
			gone = append(gone, id)
		}
	}
	return live, gone, nil
}

// Run resizes VMs; the souls registry is not touched. The step changes
// when the driver resized at least one VM: a VM that already had the
// requested spec comes back Unchanged.
func (m *Resized) Run(ctx context.Context, run module.RunInfo, raw json.RawMessage, _ module.Target) (module.Result, error) {
	var p ResizedParams
	if err := module.DecodeParams(raw, &p); err != nil {
		return module.Result{}, err
	}
	h := m.svc
	if h == nil {
		return module.Result{}, errUnprovisioned
	}
	res, err := p.run(ctx, run, h)
	if err != nil {
		return res, failed(ctx, h, run, "resized", p.Provider, attempt{vmIDs: p.VMIDs}, err)
	}
	return res, nil
}

// resizing is what a resize checks before it asks the driver: the
// provider, the pairing, that the driver resizes, and the spec.
type resizing struct {
	prov store.Provider
	d    driversdk.Driver
	dp   driversdk.Provider
	spec json.RawMessage
}

func (p ResizedParams) prepare(ctx context.Context, h *Services, run module.RunInfo) (resizing, error) {
	prov, d, dp, err := provider(ctx, h, run, p.Provider)
	if err != nil {
		return resizing{}, err
	}
	if err := checkPairing(ctx, h.Registry, run, prov.Name, p.VMIDs, nil); err != nil {
		return resizing{}, err
	}
	caps, err := d.Capabilities(ctx)
	if err != nil {
		return resizing{}, driverError("capabilities", err)
	}
	if !caps.Resizable {
		return resizing{}, &module.Error{Code: "resize.unsupported", Message: fmt.Sprintf("driver %q of provider %q cannot resize VMs", prov.Driver, prov.Name)}
	}
	sp, err := spec(ctx, h, run, prov.Name, p.Profile)
	if err != nil {
		return resizing{}, err
	}
	if _, sp, err = takeAddress(sp, "profile"); err != nil { // the keeper's key, not the driver's
		return resizing{}, err
	}
	if err := d.ValidateProfile(ctx, dp, sp); err != nil {
		return resizing{}, driverError("validate profile", err)
	}
	return resizing{prov: prov, d: d, dp: dp, spec: sp}, nil
}

func (p ResizedParams) run(ctx context.Context, run module.RunInfo, h *Services) (module.Result, error) {
	rz, err := p.prepare(ctx, h, run)
	if err != nil {
		return module.Result{}, err
	}
	prov, d, dp, sp := rz.prov, rz.d, rz.dp, rz.spec
	// The new size counts toward the project's quota before any driver
	// call, as a create's does.
	var before map[string]store.Size
	if vcpus, memory := sizeOf(sp); vcpus > 0 || memory > 0 {
		before, err = h.Registry.CloudResize(ctx, store.CloudResizeParams{Project: run.Project, Provider: prov.Name, VMIDs: p.VMIDs,
			Size: store.Size{VCPUs: vcpus, MemoryMB: memory}})
		var qe *store.QuotaError
		if errors.As(err, &qe) {
			return module.Result{}, &module.Error{Code: "quota.exceeded", Message: qe.Error() + "; no VM was resized", Err: err}
		}
		if err != nil {
			return module.Result{}, err
		}
	}
	res, err := d.Resize(ctx, driversdk.ResizeRequest{Provider: dp, VMIDs: p.VMIDs, Spec: sp})
	if err != nil {
		if before != nil {
			_ = h.Registry.CloudResizeUndo(context.WithoutCancel(ctx), prov.Name, before)
		}
		return module.Result{}, driverError("resize", err)
	}
	changed := false
	vms := make([]any, len(res))
	for i, r := range res {
		vms[i] = map[string]any{"vm_id": r.VMID, "caused_downtime": r.CausedDowntime, "changed": !r.Unchanged}
		changed = changed || !r.Unchanged
	}
	if err := h.Registry.AuditRecord(ctx, store.AuditParams{Actor: store.Actor(run.Creator), Action: "cloud.provisioned", Object: "provider/" + prov.Name, Project: run.Project,
		Payload: map[string]any{"action": "resized", "outcome": "ok", "changed": changed, "provider": prov.Name, "vm_ids": p.VMIDs, "vms": vms, "run_id": run.ID, "step": run.Step}}); err != nil {
		return module.Result{Changed: changed}, &module.Error{Code: "cloud.audit_failed", Message: "the resize is done at the provider but its cloud.provisioned event could not be written: " + err.Error(), Err: err}
	}
	return module.Result{Changed: changed, Output: map[string]any{"vms": vms, "action": "resized"}}, nil
}

// checkPairing refuses, before the driver is called, VMs this keeper did
// not create at provider (no completed create request of that provider
// recorded them) and souls that are not the given VMs of that provider:
// a hand-registered soul, a soul of another VM or another provider. Each
// refusal is a cloud.pairing_mismatch naming what did not match.
func checkPairing(ctx context.Context, st Registry, run module.RunInfo, provider string, vmIDs, sids []string) error {
	mismatch := func(format string, args ...any) error {
		return &module.Error{Code: "cloud.pairing_mismatch", Message: fmt.Sprintf(format, args...) + "; nothing was changed"}
	}
	owned, err := st.CloudVMsCreated(ctx, provider, vmIDs)
	if err != nil {
		return err
	}
	given := map[string]bool{}
	for _, id := range vmIDs {
		// Another project's VM is as unknown as one this keeper never
		// made.
		if project, ok := owned[id]; !ok || !run.Sees(project, nil) {
			return mismatch("VM %q was not created by this keeper at provider %q", id, provider)
		}
		given[id] = true
	}
	carried := map[string]string{} // vm_id -> sid
	for _, sid := range sids {
		so, err := st.SoulGet(ctx, sid)
		if errors.Is(err, store.ErrNotFound) || err == nil && !run.Sees(so.Project, nil) {
			return mismatch("soul %q is not registered", sid)
		}
		if err != nil {
			return err
		}
		switch {
		case so.VMID == "":
			return mismatch("soul %q is not a cloud VM of this keeper (registered by hand)", sid)
		case so.Provider != provider:
			return mismatch("soul %q belongs to provider %q, not %q", sid, so.Provider, provider)
		case !given[so.VMID]:
			return mismatch("soul %q is carried by VM %q, which is not among vm_ids", sid, so.VMID)
		case carried[so.VMID] != "" && carried[so.VMID] != sid:
			return mismatch("souls %q and %q both name VM %q", carried[so.VMID], sid, so.VMID)
		}
		carried[so.VMID] = sid
	}
	return nil
}

func joinsByItself(h *Services, driver string) bool {
	return h.JoinsByItself != nil && h.JoinsByItself(driver)
}
