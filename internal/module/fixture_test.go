package module

import (
	"context"
	"encoding/json"
)

// fake is a module whose declaration is given by the test.
type fake struct {
	info     Info
	validate func(Values) error
}

func (f *fake) Info() Info { return f.info }

func (f *fake) Run(context.Context, RunInfo, json.RawMessage, Target) (Result, error) {
	return Result{}, NotImplemented(f.info.ID)
}

// validating is a fake that implements Validator.
type validating struct{ fake }

func (v *validating) ValidateParams(vals Values) error { return v.validate(vals) }

var (
	_ Module    = (*fake)(nil)
	_ Validator = (*validating)(nil)
)

// cloudInfo is a declaration shaped like core.cloud.created, used by the
// rendering and params tests.
func cloudInfo() Info {
	return Info{
		ID:          "test.cloud.created",
		Summary:     "Ask the provider for `count` VMs: each gets a souls row (status pending) and a bootstrap token.",
		Description: "Runs on the keeper through the provider's CloudDriver plugin.\n\nThe SID of a created host is the FQDN the provider returned.",
		Side:        SideKeeper,
		Permission:  "cloud.create",
		Idempotent:  false,
		NeedsRoot:   false,
		Params: []Param{
			{Name: "provider", Type: TypeString, Required: true, Doc: "Name of the Cloud-Provider in the registry."},
			{Name: "profile", Type: TypeAny, Doc: "VM profile: a registered profile's name or an inline map."},
			{Name: "count", Type: TypeInt, Default: 1, Doc: "How many VMs to create (>= 1)."},
			{Name: "userdata", Type: TypeString, Doc: "Cloud-init userdata."},
			{Name: "generate_userdata", Type: TypeBool, Doc: "Generate userdata from keeper.yml cloud_init."},
			{Name: "tags", Type: TypeList, Elem: TypeString, Default: []any{"a|b"}, Doc: "Tags."},
			{Name: "token", Type: TypeString, Secret: true, DefaultDoc: "a fresh token", Doc: "A secret."},
			{Name: "mode", Type: TypeString, Enum: []string{"fast", "slow"}, Doc: "Speed."},
		},
		Exclusive: []Group{{Params: []string{"userdata", "generate_userdata"}}},
		Output: []Field{
			{Name: "hosts", Type: "array<object>", Doc: "One entry per VM: {sid, vm_id, primary_ip, attributes?, bootstrap_token}."},
			{Name: "count", Type: "int", Doc: "Number of VMs created."},
		},
		ChangesWhen:   "Always: a repeat creates new VMs.",
		UnchangedWhen: "Never.",
		Example:       "- name: provision\n  on: keeper\n  module: test.cloud.created\n  params:\n    provider: local\n",
		Notes:         []string{"Not idempotent by construction.", "Audit event cloud.provisioned on every state."},
	}
}
