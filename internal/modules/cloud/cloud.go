// Package cloud declares core.cloud.created, core.cloud.destroyed and
// core.cloud.resized: keeper-side states that create, destroy and resize
// cloud VMs through the provider's CloudDriver plugin (soul-cloud-<driver>)
// and keep the keeper's registries in step.
//
// The states run inside the keeper, which provisions them when it is built
// (module.Provisioner[Services]): each keeper gives its own copies the few
// registry methods they use (Registry), the PluginHost and its settings;
// the run, step and creator a call serves come with the call
// (module.RunInfo).
package cloud

import (
	"errors"

	"github.com/soulstack/soulstack/internal/module"
)

// The IDs of the cloud states.
const (
	CreatedID   module.ID = "core.cloud.created"
	DestroyedID module.ID = "core.cloud.destroyed"
	ResizedID   module.ID = "core.cloud.resized"
)

// Collection and Category of the three states in the catalog.
const (
	Collection = "soulstack.cloud"
	Category   = "cloud"
)

func init() {
	module.Register(new(Created))
	module.Register(new(Destroyed))
	module.Register(new(Resized))
	module.RegisterFamily(module.Family{Name: "core.cloud",
		Summary: "Create, destroy and resize cloud VMs through the provider's CloudDriver plugin.",
		Description: "core.cloud creates, destroys and resizes cloud VMs by calling the provider's CloudDriver plugin " +
			"(soul-cloud-<driver>, gRPC through go-plugin). The step runs inside the keeper (`on: keeper` is required, " +
			"else the scenario is invalid): its side effects are at the provider (real billing) and in the keeper's registries, " +
			"never on a host's filesystem. created is not idempotent (a repeat makes new VMs); destroyed updates the " +
			"registries in one cascade after the provider deleted the VMs; resized may stop a VM. A created host's SID is " +
			"the FQDN the provider reports, or the one the keeper predicts for a self-onboarding batch.\n\n" + auditNote})
}

// Created is the core.cloud.created state.
type Created struct{ svc *Services }

// Destroyed is the core.cloud.destroyed state.
type Destroyed struct{ svc *Services }

// Resized is the core.cloud.resized state.
type Resized struct{ svc *Services }

var (
	_ module.Module                = (*Created)(nil)
	_ module.Validator             = (*Created)(nil)
	_ module.Provisioner[Services] = (*Created)(nil)
	_ module.Module                = (*Destroyed)(nil)
	_ module.Validator             = (*Destroyed)(nil)
	_ module.Provisioner[Services] = (*Destroyed)(nil)
	_ module.Module                = (*Resized)(nil)
	_ module.Validator             = (*Resized)(nil)
	_ module.Provisioner[Services] = (*Resized)(nil)
)

// Provision returns core.cloud.created wired with a keeper's services.
func (*Created) Provision(s Services) (module.Module, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	return &Created{svc: &s}, nil
}

// Provision returns core.cloud.destroyed wired with a keeper's services.
func (*Destroyed) Provision(s Services) (module.Module, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	return &Destroyed{svc: &s}, nil
}

// Provision returns core.cloud.resized wired with a keeper's services.
func (*Resized) Provision(s Services) (module.Module, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	return &Resized{svc: &s}, nil
}

// check reports a required service that is missing.
func (s Services) check() error {
	switch {
	case s.Registry == nil:
		return errors.New("cloud: no registry")
	case s.Driver == nil:
		return errors.New("cloud: no driver lookup")
	case s.Credentials == nil:
		return errors.New("cloud: no credentials resolver")
	case s.Userdata == nil:
		return errors.New("cloud: no userdata renderer")
	}
	return nil
}

// CreatedParams are the params of core.cloud.created.
type CreatedParams struct {
	Provider         string `json:"provider"`
	Profile          any    `json:"profile,omitempty"`
	Count            int    `json:"count"`
	Userdata         string `json:"userdata,omitempty"`
	GenerateUserdata bool   `json:"generate_userdata,omitempty"`
	Name             string `json:"name,omitempty"`
	SelfOnboard      bool   `json:"self_onboard,omitempty"`
	// Seeds are stored for every created soul and run when it joins.
	Seeds []SeedParam `json:"seeds,omitempty"`
}

// SeedParam is one entry of core.cloud.created's seeds.
type SeedParam struct {
	Scenario string         `json:"scenario"`
	Input    map[string]any `json:"input,omitempty"`
	// secret names the inputs the scenario declares secret, as
	// checkSeeds found them: the seed is stored with them sealed.
	secret []string
}

// DestroyedParams are the params of core.cloud.destroyed.
type DestroyedParams struct {
	Provider string   `json:"provider"`
	VMIDs    []string `json:"vm_ids"`
	SIDs     []string `json:"sids,omitempty"`
}

// ResizedParams are the params of core.cloud.resized.
type ResizedParams struct {
	Provider string   `json:"provider"`
	VMIDs    []string `json:"vm_ids"`
	Profile  any      `json:"profile"`
}

// keeperNote is shared by the three states.
const keeperNote = "Keeper-side: the step runs inside the keeper (`on: keeper`); its side effects are at the provider " +
	"(real billing) and in the keeper's registries, never on a host's filesystem, so root does not apply. " +
	"Running it needs the permission named under Requirements (cloud.create, cloud.destroy or cloud.resize) besides run.create: " +
	"admin tokens have them, operator and viewer tokens do not. POST /v1/runs refuses a scenario with the step (403 auth.forbidden) " +
	"when the token lacks it, and the step fails with auth.forbidden when the run's creator was revoked, expired or lost it meanwhile."

const auditNote = "An audit event cloud.provisioned is written for every state and every outcome, as the run's creator: " +
	"outcome ok with changed, or outcome failed with error_code (the error's code, never its text, which the run's step keeps masked). " +
	"Its payload has the state (action), the provider, the VMs known (vm_ids, sids, request_id), the run and the step and, for destroyed, " +
	"the cascade counters; never plain tokens. If the audit write fails the step fails, whatever the outcome."

// driversNote names the drivers a provider may use.
const driversNote = "The provider's driver is a CloudDriver plugin, soul-cloud-<driver> in the keeper's plugin dir: " +
	"local (Linux namespaces on the keeper's host, zero-config), qemu (QEMU/KVM VMs on the keeper's host), " +
	"aws (EC2), openstack (Nova/Neutron), hcloud (Hetzner Cloud) and nubes (Nubes' deck-api, the vCloud-based cloud of the second seed); " +
	"each driver's provider config and profile keys are in docs/drivers/<driver>.md (local: the README), and driversdk lets anyone write another."

var providerParam = module.Param{Name: "provider", Type: module.TypeString, Required: true, Doc: "Name of the Cloud-Provider in the registry (driver, credentials and region)."}

// Info returns the declaration of core.cloud.created.
func (*Created) Info() module.Info {
	return module.Info{
		Collection: Collection, Category: Category,
		ID:         CreatedID,
		Permission: "cloud.create",
		Summary:    "Ask the provider for `count` VMs: each gets a souls row (status pending) and a bootstrap token.",
		Description: "Calls the provider's CloudDriver plugin through the PluginHost. The SID of a created host is the FQDN " +
			"the provider returned; a VM without an FQDN fails the step.",
		Side:       module.SideKeeper,
		Idempotent: false,
		NeedsRoot:  false,
		Params: []module.Param{
			providerParam,
			{Name: "profile", Type: module.TypeAny, Doc: "VM profile: the name of a registered Cloud-Profile, or an inline map of backend-specific settings."},
			{Name: "count", Type: module.TypeInt, Default: 1, Doc: "How many VMs to create (at least 1)."},
			{Name: "userdata", Type: module.TypeString, Doc: "Cloud-init userdata."},
			{Name: "generate_userdata", Type: module.TypeBool, Doc: "Generate userdata from keeper.yml cloud_init."},
			{Name: "name", Type: module.TypeString, Doc: "Base name of the VM batch: the keeper predicts FQDN = `<name>-<index>.<suffix>`. Required with self_onboard."},
			{Name: "self_onboard", Type: module.TypeBool, Doc: "The VM onboards itself from cloud-init: the keeper predicts FQDNs and bakes per-VM tokens into userdata. Needs name and the provider's fqdn_suffix."},
			{Name: "seeds", Type: module.TypeList, Elem: module.TypeObject, Doc: "Soul seeds stored for every created soul: `[{scenario, input}]`, scenario as YAML text, input an object. " +
				"When the soul joins (soul join), the keeper starts one run per seed targeting it, created by this run's creator, with the seed's input plus `sid`, the soul's SID (so the seed says `on: \"${ input.sid }\"`). " +
				"The step's params are interpolated first: inside a scenario, write the seed's own expressions as `$${ … }`."},
		},
		Exclusive: []module.Group{{Params: []string{"userdata", "generate_userdata", "self_onboard"}}},
		Output: []module.Field{
			{Name: "hosts", Type: "array<object>", Doc: "One entry per VM: {sid, vm_id, address, primary_ip, public_ip, private_ip, addresses: [{ip, kind: public|private, network?}], attributes?, bootstrap_token}. " +
				"address is the one the soul is reached at (see the address setting); public_ip or private_ip is empty when the VM has none."},
			{Name: "count", Type: "int", Doc: "Number of VMs created."},
			{Name: "vm_ids", Type: "array<string>", Doc: "Provider-side IDs of the created VMs."},
			{Name: "action", Type: "string", Doc: "created"},
		},
		CheckMode: "Makes the checks a create makes before it calls the driver (provider, max_count, the profile through the driver's ValidateProfile, a self_onboard batch's names, the seeds) and says it would create count VMs (each name for a self_onboard batch). " +
			"Never calls the driver's Create, registers nothing and writes no cloud.provisioned event; the new hosts are unknown, so steps that target them are unknown.",
		ChangesWhen: "Always once the driver is asked to create: creating VMs is imperative and not idempotent, so a repeat creates new VMs. " +
			"A create that fails then counts as changed too: the provider may have made VMs (tagged with the request; soulctl cloud orphans lists them).",
		UnchangedWhen: "Only when the step is refused before the driver's Create is called (count above max_count, an unknown provider or profile, " +
			"a profile the driver refuses, a self_onboard name already taken): nothing is made.",
		Example: `- name: provision
  on: keeper
  when: has(input.spawn)
  module: core.cloud.created
  params:
    provider: "${ input.spawn.provider }"
    profile:  "${ input.spawn.profile }"
    count:    "${ input.spawn.count }"`,
		Notes: []string{
			keeperNote,
			driversNote,
			"Not idempotent by construction (always changed): a repeated step creates NEW VMs rather than reconciling. " +
				"This is a real billing side effect: guard repeats in the scenario (`when:` / `changed_when:`), and never " +
				"rely on the module. After a keeper crash an interrupted create is never repeated: the run fails with run.interrupted.",
			"hosts[].bootstrap_token is the plain one-time token, deliberately in the output because cloud-init must hand " +
				"it to the VM at first boot; the database keeps only its hash. The masking filter hides it on every output " +
				"channel because its key contains `token`: do not rename it.",
			"The soul's address is chosen by the setting `address: public | private` in the profile spec or, when the profile has none, " +
				"in the provider's config (the keeper reads it; the driver never sees the key): public takes the VM's public_ip, private its private_ip, " +
				"and with no setting the public one is used when the VM has one, else the private one. Any other value fails the step before " +
				"anything is made (cloud.address_invalid); a VM without the address asked for fails it after the create (cloud.address_missing; " +
				"the VMs are tagged with the request, soulctl cloud orphans lists them). Choose private when the keeper is in the VMs' network.",
			"The keeper logs in to the VMs as the profile's ssh_user; a profile without one uses the login user the driver reports in the VM's " +
				"ssh_user attribute (soul-cloud-qemu: debian, cloud-init's default user of Debian's images), else root.",
			"Souls rows created by this step have no creating actor (keeper-internal action).",
			"With self_onboard the userdata fetches the soul agent from the keeper's agent listener (advertise_url, checked against the keeper CA's fingerprint and the binary's sha256), " +
				"runs `soul join` and starts `soul run`. The join uses the VM's one-time bootstrap token (issued, bound to the SID, valid for bootstrap_token_ttl from creation): " +
				"the soul becomes active and its SSH host key is pinned from what the agent reported, so there is no trust-on-first-use window. " +
				"Each seed's scenario is checked when the step runs, with its input plus sid (cloud.seed_invalid names seeds[i] and the problem); an invalid seed fails the step before anything is made. " +
				"Seed runs are keyed by soul and seed: a second join does not run a seed twice.",
			"Ready means ready: a later step targets such a soul only once its cloud-init has finished " +
				"(`cloud-init status --wait` over the first connection, within the step's timeout; a refused key is retried " +
				"meanwhile, since cloud-init may not have written it yet). A cloud-init that failed fails the target with " +
				"soul.cloud_init_failed and the last lines of /var/log/cloud-init-output.log, and the soul stays pending.",
			auditNote,
		},
	}
}

// ValidateParams checks that count is at least 1 and that self_onboard
// comes with name.
func (*Created) ValidateParams(v module.Values) error {
	var errs []error
	if x, ok := v.Get("count"); ok {
		if n, ok := module.Int(x); ok && n < 1 {
			errs = append(errs, module.Invalid("count", "param \"count\" must be at least 1, got %d", n))
		}
	}
	if x, ok := v.Get("self_onboard"); ok && x == true && !v.Has("name") {
		errs = append(errs, module.Invalid("self_onboard", "param \"self_onboard\" needs param \"name\" (the base name the FQDNs are predicted from)"))
	}
	return errors.Join(errs...)
}

// Info returns the declaration of core.cloud.destroyed.
func (*Destroyed) Info() module.Info {
	return module.Info{
		Collection: Collection, Category: Category,
		ID:         DestroyedID,
		Permission: "cloud.destroy",
		Summary:    "Destroy VMs at the provider, then mark their souls destroyed, their soul seeds orphaned and their bootstrap tokens burned.",
		Description: "A destructive cascade: PluginHost.Destroy(vm_ids) physically destroys the instances; then, when sids " +
			"is not empty, one database transaction moves the souls to destroyed, their active soul_seeds to orphaned and " +
			"their bootstrap_tokens to burned. The cascade runs only after a successful destroy.",
		Side:       module.SideKeeper,
		Idempotent: true,
		NeedsRoot:  false,
		Params: []module.Param{
			providerParam,
			{Name: "vm_ids", Type: module.TypeList, Elem: module.TypeString, Required: true, Doc: "Provider-side IDs of the VMs to destroy."},
			{Name: "sids", Type: module.TypeList, Elem: module.TypeString, Doc: "SIDs of the souls those VMs carry, for the registry cascade."},
		},
		Output: []module.Field{
			{Name: "vm_ids", Type: "array<string>", Doc: "The VMs of vm_ids: all gone at the provider once the step succeeded."},
			{Name: "already_gone", Type: "array<string>", Doc: "Those of vm_ids that were already gone before the step (the driver no longer listed them)."},
			{Name: "sids", Type: "array<string>", Doc: "The sids given: their souls are destroyed once the step succeeded (souls_destroyed counts those that moved now)."},
			{Name: "souls_destroyed", Type: "int", Doc: "Souls rows moved to destroyed."},
			{Name: "seeds_orphaned", Type: "int", Doc: "Soul seeds moved to orphaned."},
			{Name: "bootstraps_burned", Type: "int", Doc: "Bootstrap tokens burned (named so that the masking of keys containing \"token\" leaves the count readable)."},
			{Name: "action", Type: "string", Doc: "destroyed"},
		},
		CheckMode: "Makes the pairing checks and asks the driver which VMs it still lists: those would be destroyed, and the souls not yet destroyed would be marked so. Never calls the driver's Destroy and changes no registry row.",
		ChangesWhen: "A VM of vm_ids was still at the provider (the driver listed it) and was destroyed, or a registry row moved " +
			"(a soul to destroyed, a soul seed to orphaned, a bootstrap token to burned).",
		UnchangedWhen: "Every VM of vm_ids was already gone (status ok, all of them in already_gone) " +
			"and the registry rows of sids were already final (souls destroyed, seeds orphaned, tokens burned).",
		Example: `- name: teardown
  on: keeper
  module: core.cloud.destroyed
  params:
    provider: local
    vm_ids: "${ steps.provision.output.vm_ids }"
    sids: "${ steps.provision.output.hosts.map(h, h.sid) }"`,
		Notes: []string{
			keeperNote,
			"If the destroy fails, the registries stay untouched: the host is still alive at the provider.",
			"A VM already gone is not an error: the keeper first lists the provider's VMs (drivers with the Listable capability) and reports " +
				"those of vm_ids it lacks in already_gone. Destroy is still asked for every VM of vm_ids, since destroying a VM already gone " +
				"succeeds by the driver contract and a list that lags behind the provider must never leave a VM running; when the driver " +
				"answers vm.not_found for VMs its list lacked too, only the listed ones are asked for again. A driver that cannot list its VMs " +
				"cannot tell which were gone: the step changes.",
			"Every VM in vm_ids must have been created by this keeper at that provider (a completed core.cloud.created request recorded it), " +
				"and every soul in sids must be one of those VMs of that provider: a hand-registered soul, a soul of another VM or provider, " +
				"or a VM this keeper did not create fails the step with cloud.pairing_mismatch before the driver is called. " +
				"A VM this keeper created that is already gone still pairs (its completed create request is kept): it is already gone, not a mismatch. " +
				"The registry cascade is filtered the same way, by provider and vm_id.",
			auditNote,
		},
	}
}

// ValidateParams checks that vm_ids is not empty.
func (*Destroyed) ValidateParams(v module.Values) error { return checkVMIDs(v) }

// Info returns the declaration of core.cloud.resized.
func (*Resized) Info() module.Info {
	return module.Info{
		Collection: Collection, Category: Category,
		ID:          ResizedID,
		Permission:  "cloud.resize",
		Summary:     "Resize VMs at the provider to a new profile; this may cause downtime.",
		Description: "The driver decides whether a VM must be stopped and started for the resize; the keeper is agnostic to the sequence.",
		Side:        module.SideKeeper,
		Idempotent:  true,
		NeedsRoot:   false,
		Params: []module.Param{
			providerParam,
			{Name: "vm_ids", Type: module.TypeList, Elem: module.TypeString, Required: true, Doc: "Provider-side IDs of the VMs to resize."},
			{Name: "profile", Type: module.TypeAny, Required: true, Doc: "Target size: the name of a registered Cloud-Profile, or an inline map of backend-specific settings."},
		},
		Output: []module.Field{
			{Name: "vms", Type: "array<object>", Doc: "One entry per VM: {vm_id, caused_downtime, changed}; changed is false for a VM that already had the requested size."},
			{Name: "action", Type: "string", Doc: "resized"},
		},
		CheckMode:     "Makes the checks a resize makes before it calls the driver (pairing, the driver can resize, the profile validates) and names the VMs it would ask to resize; whether a VM already has the size is the driver's to say when it resizes, so the target is unknown. Never calls the driver's Resize.",
		ChangesWhen:   "The driver resized at least one VM of vm_ids (its entry in vms has changed: true).",
		UnchangedWhen: "Every VM already had the requested size: the driver reported each unchanged and did nothing to it (status ok, no downtime).",
		Example: `- name: grow
  on: keeper
  module: core.cloud.resized
  params:
    provider: local
    vm_ids: [vm-1]
    profile: {cpus: 2, memory_mb: 1024}`,
		Notes: []string{
			keeperNote,
			"caused_downtime in the output tells, per VM, whether it was restarted.",
			"Whether a VM already has the size is the driver's answer (ResizeResult.Unchanged in the driver SDK): soul-cloud-local compares the " +
				"VM's cpus and memory_mb after merging the spec. A driver that does not report it has every VM counted as resized (changed).",
			"The souls registry is not touched: a resize does not change which souls exist.",
			"Every VM in vm_ids must have been created by this keeper at that provider; another fails the step with cloud.pairing_mismatch before the driver is called.",
			"A driver without the Resizable capability fails the step with resize.unsupported.",
			auditNote,
		},
	}
}

// ValidateParams checks that vm_ids is not empty.
func (*Resized) ValidateParams(v module.Values) error { return checkVMIDs(v) }

func checkVMIDs(v module.Values) error {
	if x, ok := v.Get("vm_ids"); ok {
		if l, _ := x.([]any); len(l) == 0 {
			return module.Invalid("vm_ids", "param \"vm_ids\" must name at least one VM")
		}
	}
	return nil
}
