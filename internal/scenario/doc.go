// Package scenario reads scenarios: it parses them strictly, validates
// them against the module catalog and the expression language, and plans
// them for the engine. It has no side effects: nothing here runs a module,
// touches a soul or writes to a store.
//
// A scenario is YAML of at most MaxSize (1 MiB):
//
//	name: spawn-and-install          # optional; defaults to the file name
//	description: free text           # optional
//	inputs:                          # optional; when present, undeclared inputs are errors
//	  spawn:    {type: object, required: false}
//	  packages: {type: list, default: [git, curl]}
//	  db_password: {type: string, secret: true}
//	steps:
//	  - name: provision
//	    on: keeper
//	    when: has(input.spawn)
//	    module: core.cloud.created
//	    params:
//	      provider: "${ input.spawn.provider }"
//	      count:    "${ input.spawn.count }"
//	  - name: base
//	    on: "${ steps.provision.output.hosts.map(h, h.sid) }"
//	    module: core.pkg.installed
//	    params: {packages: "${ input.packages }"}
//	    changed_when: result.output.installed.size() > 0
//
// Top-level keys that start with "x-" are extension fields, ignored: they
// hold YAML anchors to reuse (x-defaults: &defaults {...}, then
// <<: *defaults in steps).
//
// Inputs. Each input is declared with a map of: type (string, int, bool,
// list, map, object or any; any when left out), required (true by default
// when there is no default, false otherwise), default, secret (masked on
// every output channel and encrypted at rest whatever its name) and doc.
// Input names are identifiers ([A-Za-z_][A-Za-z0-9_]*) so that
// input.<name> works. When inputs is present, an input that is not
// declared is an error; when it is absent, any input is accepted.
//
// Steps. Each step is a map of:
//
//   - name (required): an identifier, unique in the scenario; later steps
//     see steps.<name>.output, .changed and .status.
//   - module (required): the module's ID, namespace.module.state.
//   - on (required): keeper for keeper-side modules (which need it); for
//     soul-side modules a SID, a list of SIDs, or ${ } expressions giving
//     a SID or a list of SIDs (lists in a list are flattened).
//   - params: a map of the module's params. Values may hold ${ }
//     expressions; a string that is exactly one ${ } keeps the
//     expression's type. Params are checked against the module's
//     declaration: unknown, missing, mistyped and conflicting params are
//     errors, and so is a literal value for a secret param (it belongs in
//     a secret input). Map keys are never interpolated.
//   - when: a CEL bool expression (or true/false); false skips the step
//     (per target for soul-side steps, where soul is visible).
//   - changed_when, failed_when: CEL bool expressions that override the
//     module's verdicts; they see result ({output, changed, failed,
//     error}).
//   - any_errors_fatal: when true, one failed target fails the run;
//     otherwise the other targets go on and later steps skip the failed
//     ones.
//   - forks: how many targets run at once (1 to MaxForks); the run's
//     default (50) when left out. Soul-side steps only.
//   - retries (0 to MaxRetries) and retry_delay (a duration, 5s by
//     default): how often a failed target is tried again. Refused for
//     modules that are not idempotent, whose side effects a retry could
//     repeat.
//   - connect: {retries, delay}: how the transport retries connecting to
//     a soul that is not reachable yet; the soul's or transport's
//     defaults (3 tries, 10 s apart) when left out. Soul-side steps only.
//   - timeout: a duration bounding one target's run of the module.
//   - description: free text.
//
// Expressions are CEL (see package expr). A step sees only earlier steps:
// a reference to a later step, to itself or to an unknown step is an
// error, as is a reference to an undeclared input when inputs are
// declared.
//
// Every problem is reported, not only the first, each with file:line:column
// and a stable code such as scenario.unknown_param (see the Code
// constants); an *Error holds them all and matches ErrInvalid.
//
// Hostile input is bounded: larger than MaxSize is rejected before
// parsing; nesting deeper than MaxDepth, block mappings with more than
// MaxMapKeys keys and documents that expand to more than MaxNodes values
// through aliases are rejected as scenario.too_complex.
//
// Use Load to go from text and input to a Plan in one call, or Parse,
// Scenario.Validate and Scenario.Plan separately.
package scenario
