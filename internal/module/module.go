// Package module defines what a Soul Stack module is: its stable ID, the
// declaration (Info) that scenario validation and the catalog are built
// from, the Run contract the engine calls, and the process-wide registry
// that module packages add themselves to at init.
//
// A module package declares one Go type per state and registers it:
//
//	func init() { module.Register(new(Installed)) }
//
// The default set is linked in by blank-importing
// internal/modules/standard. Lookups by ID return errors; only
// registration mistakes (an empty, invalid or duplicate ID, a malformed
// declaration) panic, because they are programming errors found at start.
//
// Besides the core Module interface a module may implement optional
// one-method interfaces, found by type assertion:
//
//   - Checker: the module's check path, which says what Run would change
//     without changing anything (check runs). When absent, a check run
//     reports the module's targets unknown.
//   - Validator: cross-field checks of params beyond the declared specs.
//     When absent, only the declared specs (types, required, mutually
//     exclusive groups) are checked.
//   - Provisioner: a keeper-side module that needs the keeper's services
//     (registries, driver plugins, settings) receives them once, when the
//     keeper is built, and the keeper runs the module Provision returns.
//     When absent, the registered value is run as it is.
package module

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/probe"
)

// Module is one state of a module, for example core.pkg.installed.
//
// Implementations must be safe for concurrent use: the engine calls Run for
// many targets at once on the single registered value.
type Module interface {
	// Info returns the module's declaration. It must return the same
	// value on every call.
	Info() Info

	// Run brings target into the module's state. params is the JSON
	// object of the step's params after expressions were evaluated,
	// defaults applied and the declared specs checked; the module decodes
	// it strictly into its own struct (see DecodeParams). Run returns what
	// changed and the output later steps see as steps.<name>.output. A
	// returned error fails the target; use *Error to give it a stable
	// code. run says which run and step the call belongs to and who
	// created the run.
	Run(ctx context.Context, run RunInfo, params json.RawMessage, target Target) (Result, error)
}

// Checker is a module with a check path: Check says, changing nothing on
// the target or in any cloud, whether Run with the same params would
// change it. It runs only the module's deciding probe. The prediction
// must be exact: where Check says WouldChange, Run reports Changed, and
// where it says not, Run does not; where it cannot know, it says Unknown
// and why. A module that does not implement Checker is unknown in a check
// run ("no check path"), never skipped.
type Checker interface {
	Check(ctx context.Context, run RunInfo, params json.RawMessage, target Target) (Prediction, error)
}

// Prediction is what Check says about one target.
type Prediction struct {
	// WouldChange says Run would change the target; meaningless when
	// Unknown is set.
	WouldChange bool
	// Unknown, when not empty, says why the module cannot tell.
	Unknown string
	// Changes say what would change, for people (diffs, packages, VMs).
	Changes []client.Change
	// Output is the output Run would return, when the module knows it
	// exactly (nothing would change, say); later steps' expressions see
	// it. OutputKnown says whether it is.
	Output      any
	OutputKnown bool
}

// CodeChecker is a module whose Check may run code the scenario's author
// wrote (core.script.ran with check: true): CheckRunsCode says whether it
// does for params (nil or an error evaluating them: assume it does). An
// approval policy holds such a step in a check run as it holds it in an
// apply. Absent: Check runs only the module's own probe.
type CodeChecker interface {
	CheckRunsCode(params json.RawMessage) bool
}

// FailureAuditor is a module that audits every outcome of its steps, so
// also a step that fails before Run is called (its params do not
// evaluate, the run's creator lost the step's permission): the engine
// hands it such a failure, and the error it returns fails the target.
type FailureAuditor interface {
	AuditFailure(ctx context.Context, run RunInfo, err error) error
}

// RunInfo is the run a step executes in, passed to every Run as a typed
// argument: who asked for the work and where the secrets it touches must be
// masked.
type RunInfo struct {
	// ID is the run's id; empty outside a run (tests, tools).
	ID string
	// Step is the step's name.
	Step string
	// Creator is the id of the API token that created the run: the actor
	// of every audit event the step writes.
	Creator string
	// Project is the run's project: the step may use that project's
	// providers, profiles and souls (and the providers and profiles shared
	// with it) alone. Empty outside a run, where nothing is confined.
	Project string
	// Secrets masks the text of secrets the module resolves or mints in
	// this run's events, outputs and logs. Nil outside a run.
	Secrets Secrets
	// SecretParams names the step's params whose values carry secrets:
	// the params the module declares secret and those computed from the
	// run's secret inputs. A module must not report anything derived from
	// them, such as a hash, which would let a reader guess a short secret.
	SecretParams []string
}

// Sees reports whether the step may use an object of project, shared
// with shared: every object outside a run, else one of the run's project
// or shared with it.
func (r RunInfo) Sees(project string, shared []string) bool {
	return Visible(project, shared, r.Project)
}

// Visible reports whether an object of owner, shared with shared, may be
// seen and used in project; in every project when project is empty
// (keeper-wide). The API and the cloud steps share this one rule.
func Visible(owner string, shared []string, project string) bool {
	return project == "" || project == owner || slices.Contains(shared, project)
}

// SecretParam reports whether the step's param name carries a secret.
func (r RunInfo) SecretParam(name string) bool {
	return slices.Contains(r.SecretParams, name)
}

// Secrets collects the text of secrets a run has seen (the engine passes
// the run's *secret.Set).
type Secrets interface {
	// Add registers value so that it is masked wherever it appears in this
	// run's events, outputs, errors and logs — and nowhere else: it never
	// rewrites another run, the registries or the audit log.
	Add(value string)
}

// AddSecret registers value with the run's Secrets, if it has any.
func (r RunInfo) AddSecret(value string) {
	if r.Secrets != nil {
		r.Secrets.Add(value)
	}
}

// Validator is implemented by modules whose params have rules the
// declared specs cannot express, such as "name is required when
// self_onboard is true" or "count must be at least 1".
//
// ValidateParams is called twice: by scenario validation, before anything
// runs, with the params whose values are known then (values that come
// from expressions are only marked as present, see Values.Dynamic), and by
// the engine with every value known, just before Run. It returns nil, a
// *ParamError, or several joined with errors.Join. When a module does not
// implement Validator, only the declared specs are checked.
type Validator interface {
	ValidateParams(v Values) error
}

// Provisioner is implemented by keeper-side modules that need the keeper's
// services, S being the narrow set a module family declares next to
// itself (cloud.Services for the cloud states). When a keeper is built it
// finds, among the registered modules, those that implement
// Provisioner[S] for a services type it offers, calls Provision once with
// that keeper's services, and its engine runs the returned module in place
// of the registered value; each keeper in a process provisions its own
// copies. The registered value stays the declaration (Info,
// ValidateParams) that scenario validation and the catalog use; run
// without provisioning, it fails with module.keeper_services_unavailable.
type Provisioner[S any] interface {
	Provision(services S) (Module, error)
}

// Provision returns, by ID, every registered module that implements
// Provisioner[S], provisioned with services: what a keeper hands its
// engine. An error names the module whose Provision failed.
func Provision[S any](services S) (map[ID]Module, error) {
	out := map[ID]Module{}
	for _, m := range All() {
		p, ok := m.(Provisioner[S])
		if !ok {
			continue
		}
		pm, err := p.Provision(services)
		if err != nil {
			return nil, fmt.Errorf("provision %s: %w", m.Info().ID, err)
		}
		out[m.Info().ID] = pm
	}
	return out, nil
}

// Target is what a module acts on: one soul reached over a transport, or
// the keeper itself for keeper-side modules.
type Target interface {
	// SID returns the soul's ID, or Keeper for keeper-side steps.
	SID() string

	// Exec runs one command on the target and waits for it. A non-zero
	// exit status is reported in ExecResult, not as an error; the error
	// is for a command that could not be run at all (an unreachable host,
	// a broken connection, a cancelled context). On the keeper target
	// Exec returns ErrNoExec: keeper-side modules get what they need
	// (plugin host, registries) when they are wired, not through Target.
	Exec(ctx context.Context, cmd Command) (ExecResult, error)
}

// Keeper is the SID of the keeper's own target in run results.
const Keeper = "keeper"

// Command is one program run by Target.Exec.
type Command struct {
	// Argv is the program and its arguments; the transport quotes them.
	Argv []string
	// Env holds extra environment variables for the program.
	Env map[string]string
	// Dir is the working directory; empty means the login directory.
	Dir string
	// Stdin is written to the program's standard input, then closed.
	Stdin []byte
	// ReadOnly says the command changes nothing on the soul (a probe of
	// the current state): it is sent as a plain command, run again rather
	// than reattached after a crash or a cut connection, at the cost of a
	// plain exec. Every other command of an apply run is durable (it
	// outlives the keeper and the connection and never runs twice).
	ReadOnly bool
	// Probe, on a read-only command built by package probe, is the
	// question Argv's script answers: an executor on the soul may answer
	// it in its own process instead of running Argv.
	Probe *probe.Request
}

// ExecResult is the outcome of a command that ran.
type ExecResult struct {
	ExitCode int
	Stdout   []byte
	Stderr   []byte
}

// Result is what one Run reports for one target.
type Result struct {
	// Changed reports whether the target was modified.
	Changed bool
	// Output is a JSON-compatible value (usually map[string]any) that
	// later steps see as steps.<name>.output.
	Output any
}

// Side says where a module runs.
type Side string

// The sides a module runs on.
const (
	// SideKeeper modules run inside the keeper process; their steps must
	// say `on: keeper`.
	SideKeeper Side = "keeper"
	// SideSoul modules run on souls over a transport.
	SideSoul Side = "soul"
)

// Valid reports whether s is one of the defined sides.
func (s Side) Valid() bool { return s == SideKeeper || s == SideSoul }

// Info is a module's declaration. Scenario validation checks params
// against it, and the catalog (GET /v1/modules, `soulctl modules show`)
// renders it.
type Info struct {
	// ID is the module's stable name.
	ID ID `json:"id"`
	// Summary says in one sentence what the state does.
	Summary string `json:"summary"`
	// Description is optional longer text, in paragraphs separated by a
	// blank line.
	Description string `json:"description,omitempty"`
	// Side says where the module runs.
	Side Side `json:"side"`
	// Idempotent reports whether running the module again with the same
	// params is safe: the engine resumes idempotent steps after a crash
	// and never blindly repeats the others.
	Idempotent bool `json:"idempotent"`
	// NeedsRoot reports whether the module needs root on the soul (the
	// transport uses sudo when the connecting user is not root).
	NeedsRoot bool `json:"needs_root"`
	// Permission is the API permission (such as cloud.create) a run's
	// creator must hold, besides run.create, for a step of this module:
	// POST /v1/runs refuses a scenario with the step when the token lacks
	// it, and the engine checks the creator again when the step executes.
	// Every keeper-side module must declare one; Register panics
	// otherwise.
	Permission string `json:"permission,omitempty"`
	// Params are the accepted params, in catalog order.
	Params []Param `json:"params"`
	// Exclusive lists groups of params of which at most one (or exactly
	// one, when the group is Required) may be given.
	Exclusive []Group `json:"exclusive,omitempty"`
	// Output lists the fields of the output, in catalog order.
	Output []Field `json:"output"`
	// ChangesWhen and UnchangedWhen say when the module reports a change.
	ChangesWhen   string `json:"changes_when"`
	UnchangedWhen string `json:"unchanged_when"`
	// CheckMode says what the module does in a check run (its deciding
	// probe, what it never does) and when it reports unknown; empty for
	// a module without a check path, which a check run reports unknown.
	CheckMode string `json:"check_mode,omitempty"`
	// Example is a scenario step (YAML) that uses the module.
	Example string `json:"example,omitempty"`
	// Notes are catalog remarks: pitfalls, security, defaults.
	Notes []string `json:"notes,omitempty"`
	// Collection is the catalog collection the module ships in (such as
	// soulstack.cloud) and Category its shelf in the catalog (cloud).
	Collection string `json:"collection,omitempty"`
	Category   string `json:"category,omitempty"`
}

// Param returns the spec of the param called name.
func (i Info) Param(name string) (Param, bool) {
	for _, p := range i.Params {
		if p.Name == name {
			return p, true
		}
	}
	return Param{}, false
}

// SecretParams returns the names of the params declared secret, whose
// values every output channel must mask.
func (i Info) SecretParams() []string {
	var names []string
	for _, p := range i.Params {
		if p.Secret {
			names = append(names, p.Name)
		}
	}
	return names
}

// Param is the spec of one param.
type Param struct {
	// Name is the param's key in the step's params.
	Name string `json:"name"`
	// Type is the accepted type.
	Type Type `json:"type"`
	// Elem is the type of the elements of a list, or of the values of a
	// map; empty means any.
	Elem Type `json:"elem,omitempty"`
	// Required params must be given.
	Required bool `json:"required,omitempty"`
	// Default is used when the param is not given (nil: no default).
	Default any `json:"default,omitempty"`
	// DefaultDoc describes a default that is computed at run time, such
	// as "the connecting user"; it is shown in the catalog only.
	DefaultDoc string `json:"default_doc,omitempty"`
	// Enum, when not empty, lists the allowed values of a string param.
	Enum []string `json:"enum,omitempty"`
	// Secret params are masked on every output channel.
	Secret bool `json:"secret,omitempty"`
	// Doc describes the param in one or two sentences.
	Doc string `json:"doc"`
}

// Group is a set of mutually exclusive params.
type Group struct {
	// Params are the names of the params in the group.
	Params []string `json:"params"`
	// Required means exactly one of them must be given; otherwise at most
	// one may be.
	Required bool `json:"required,omitempty"`
}

// Field is one field of a module's output.
type Field struct {
	Name string `json:"name"`
	// Type is descriptive text for the catalog, such as "array<string>".
	Type string `json:"type"`
	Doc  string `json:"doc"`
}
