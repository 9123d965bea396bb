package client

import (
	"context"
	"encoding/json"
	"net/http"
)

// Module is one module state of the keeper's catalog, as served by
// GET /v1/modules/{id}: what it does, where it runs, the params it accepts
// and the output it returns.
type Module struct {
	ID          string `json:"id" doc:"Stable module ID: namespace.module.state, e.g. core.pkg.installed."`
	Summary     string `json:"summary" doc:"What the state does, in one sentence."`
	Description string `json:"description,omitempty" required:"false" doc:"Longer text, in paragraphs separated by a blank line."`
	Side        string `json:"side" enum:"keeper,soul" doc:"keeper: runs inside the keeper and the step must say on: keeper; soul: runs on the step's target souls."`
	Idempotent  bool   `json:"idempotent" doc:"Whether a repeat with the same params is safe; the keeper resumes idempotent steps after a crash and never blindly repeats the others."`
	NeedsRoot   bool   `json:"needs_root" doc:"Whether the module needs root on the soul (sudo is used when the connecting user is not root)."`
	Permission  string `json:"permission,omitempty" required:"false" doc:"The permission (e.g. cloud.create) a run's creator needs, besides run.create, for a step of this module; checked when the run is submitted and again when the step runs."`
	// Params are the accepted params, in catalog order.
	Params []ModuleParam `json:"params"`
	// Exclusive lists groups of params of which at most one (exactly one
	// when the group is required) may be given.
	Exclusive []ModuleGroup `json:"exclusive,omitempty" required:"false"`
	// Output lists the fields of the output, in catalog order.
	Output        []ModuleField `json:"output"`
	ChangesWhen   string        `json:"changes_when" doc:"When the module reports a change."`
	UnchangedWhen string        `json:"unchanged_when" doc:"When it does not."`
	CheckMode     string        `json:"check_mode,omitempty" required:"false" doc:"What the module does in a check run and when it reports unknown; absent: no check path (a check run reports it unknown)."`
	Example       string        `json:"example,omitempty" required:"false" doc:"A scenario step (YAML) that uses the module."`
	Notes         []string      `json:"notes,omitempty" required:"false" doc:"Catalog remarks: pitfalls, security, defaults."`
	Collection    string        `json:"collection,omitempty" required:"false" doc:"The catalog collection the module ships in, e.g. soulstack.cloud."`
	Category      string        `json:"category,omitempty" required:"false" doc:"The module's shelf in the catalog, e.g. cloud."`
}

// ModuleParam is the spec of one param of a module.
type ModuleParam struct {
	Name     string `json:"name"`
	Type     string `json:"type" enum:"string,int,bool,list,map,object,any"`
	Elem     string `json:"elem,omitempty" required:"false" doc:"Type of a list's elements or a map's values; absent means any."`
	Required bool   `json:"required,omitempty" required:"false"`
	// Default is the value used when the param is not given; absent when
	// there is none. The default of a secret param is masked.
	Default    json.RawMessage `json:"default,omitempty" required:"false" doc:"Value used when the param is not given."`
	DefaultDoc string          `json:"default_doc,omitempty" required:"false" doc:"A default computed at run time, described (e.g. the connecting user)."`
	Enum       []string        `json:"enum,omitempty" required:"false" doc:"The allowed values of a string param."`
	Secret     bool            `json:"secret,omitempty" required:"false" doc:"The value is masked on every output channel."`
	Doc        string          `json:"doc"`
}

// ModuleGroup is a set of mutually exclusive params.
type ModuleGroup struct {
	Params   []string `json:"params"`
	Required bool     `json:"required,omitempty" required:"false" doc:"Exactly one of the params must be given; otherwise at most one may be."`
}

// ModuleField is one field of a module's output.
type ModuleField struct {
	Name string `json:"name"`
	Type string `json:"type" doc:"Descriptive type, e.g. array<string>."`
	Doc  string `json:"doc"`
}

// ModuleList is the whole catalog, sorted by ID. Next is always empty: the
// catalog is one page.
type ModuleList struct {
	Items []Module `json:"items"`
	Next  string   `json:"next"`
}

// RevealsSecret exempts the catalog from key-name masking: it holds
// declarations compiled into the keeper, never secret values, and its
// params' "secret" flags must reach the caller as booleans. The server
// masks the defaults of secret params itself.
func (Module) RevealsSecret() {}

// RevealsSecret exempts the catalog from key-name masking (see
// Module.RevealsSecret).
func (ModuleList) RevealsSecret() {}

// ModuleList returns every module state the keeper knows, sorted by ID
// (every page of the catalog).
func (c *Client) ModuleList(ctx context.Context) (*ModuleList, error) {
	items, err := allPages(ctx, c, "/v1/modules", nil, func(l *ModuleList) ([]Module, string) { return l.Items, l.Next })
	if err != nil {
		return nil, err
	}
	return &ModuleList{Items: items}, nil
}

// ModuleGet returns one module state of the catalog by ID.
func (c *Client) ModuleGet(ctx context.Context, id string) (*Module, error) {
	return call[Module](ctx, c, http.MethodGet, "/v1/modules/"+esc(id), nil, nil)
}

// ModuleFamily is a module's catalog page across its states (GET
// /v1/modules/families/{name}, e.g. core.cloud).
type ModuleFamily struct {
	Name        string   `json:"name" doc:"namespace.module, e.g. core.cloud."`
	Summary     string   `json:"summary"`
	Description string   `json:"description,omitempty" required:"false"`
	Collection  string   `json:"collection,omitempty" required:"false"`
	Category    string   `json:"category,omitempty" required:"false"`
	States      []Module `json:"states" doc:"Each state of the module, sorted by ID."`
}

// ModuleFamilyGet returns a module's page across its states.
func (c *Client) ModuleFamilyGet(ctx context.Context, name string) (*ModuleFamily, error) {
	return call[ModuleFamily](ctx, c, http.MethodGet, "/v1/modules/families/"+esc(name), nil, nil)
}
