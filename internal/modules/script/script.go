// Package script declares core.script.ran: the second seed's one-shot
// "function". A handler script gets an event as one JSON line on its
// standard input and env vars; its JSON standard output is the output.
package script

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/module"
)

// RanID is the ID of the Ran state.
const RanID module.ID = "core.script.ran"

// Error codes of core.script.ran.
const (
	// CodeFailed means the script exited with a non-zero status.
	CodeFailed = "script.failed"
	// CodeOutputInvalid means the script exited 0 but its standard output
	// is not JSON.
	CodeOutputInvalid = "script.output_invalid"
)

func init() { module.Register(new(Ran)) }

// Ran is the core.script.ran state.
type Ran struct{}

var (
	_ module.Module    = (*Ran)(nil)
	_ module.Validator = (*Ran)(nil)
	_ module.Checker   = (*Ran)(nil)
)

// RanParams are the params of core.script.ran.
type RanParams struct {
	Source      string            `json:"source,omitempty"`
	Path        string            `json:"path,omitempty"`
	Interpreter string            `json:"interpreter,omitempty"`
	Event       map[string]any    `json:"event,omitempty"`
	Env         map[string]string `json:"env,omitempty"`
	Check       bool              `json:"check,omitempty"`
}

// Info returns the declaration of core.script.ran.
func (*Ran) Info() module.Info {
	return module.Info{
		ID:      RanID,
		Summary: "Run a handler script on each target soul with an event on its standard input; its JSON standard output is the output.",
		Description: "The script comes from `source` (text in the scenario) or `path` (a file on the keeper) and runs under `interpreter`. " +
			"`event` is written to its standard input as one JSON line. A zero exit with JSON on standard output succeeds " +
			"with that JSON as the output; a zero exit with standard output that is not JSON fails the target (`script.output_invalid`); " +
			"a non-zero exit fails it with the script's standard error as the message (`script.failed`).",
		Side:       module.SideSoul,
		Idempotent: false,
		NeedsRoot:  false,
		Params: []module.Param{
			{Name: "source", Type: module.TypeString, Doc: "Script text."},
			{Name: "path", Type: module.TypeString, Doc: "Path of the script on the keeper."},
			{Name: "interpreter", Type: module.TypeString, Default: "/bin/sh", Doc: "Program that runs the script."},
			{Name: "event", Type: module.TypeObject, Doc: "Business parameters, sent as one JSON line on standard input."},
			{Name: "env", Type: module.TypeMap, Elem: module.TypeString, Doc: "Extra environment variables, such as connection settings."},
			{Name: "check", Type: module.TypeBool, Default: false, Doc: "The script answers check runs: run with SOULSTACK_CHECK=1 in its environment, it changes nothing and prints its JSON with `\"changed\"` saying whether a real run would change something. Without it a check run reports the script unknown."},
		},
		Exclusive: []module.Group{{Params: []string{"source", "path"}, Required: true}},
		Output: []module.Field{
			{Name: "(script)", Type: "any", Doc: "The JSON value the script printed on standard output."},
		},
		CheckMode: "A script that declares `check: true` runs with SOULSTACK_CHECK=1 in its environment: it must change nothing and print its JSON with `\"changed\"` saying whether a real run would. " +
			"Any other script is unknown (what it changes is known only when it runs) and does not run.",
		ChangesWhen:   "The script ran, unless its JSON output is an object with `\"changed\": false`.",
		UnchangedWhen: "The script's JSON output is an object with `\"changed\": false`.",
		Example: `- name: install_packages
  on: web-1.local.test
  module: core.script.ran
  params:
    interpreter: /usr/bin/python3
    path: handlers/install_packages.py
    event:
      packages: [git, curl]`,
		Notes: []string{
			"Standard output must be valid JSON (an empty output counts as null), as the seed's handler returns JSON: a zero exit with anything else fails the target with `script.output_invalid`, " +
				"and the text is kept in the target's output as `{\"stdout\": \"…\"}` (masked like every output) so the run shows what the script printed. " +
				"A non-zero exit fails with `script.failed` whatever standard output held.",
			"`event`, `env` and the script text travel over the connection's input, never in a command line, so other users of the soul cannot read them in its process list; " +
				"the interpreter's arguments can be read there. Secrets belong in `event` or `env` values, not in the script text: " +
				"every output channel masks secret-looking keys, and scenarios are stored as written.",
		},
	}
}

// ValidateParams checks that the script text and the interpreter are not
// empty.
func (*Ran) ValidateParams(v module.Values) error {
	var errs []error
	for _, name := range []string{"source", "path", "interpreter"} {
		if x, ok := v.Get(name); ok {
			if s, _ := x.(string); strings.TrimSpace(s) == "" {
				errs = append(errs, module.Invalid(name, "param %q must not be empty", name))
			}
		}
	}
	return errors.Join(errs...)
}

// sourceVar is the environment variable that carries the script text to
// runScript: environment values travel on the connection's input, so the
// text never sits in a command line. It is reserved: a value given for it
// in `env` is replaced.
const sourceVar = "SOULSTACK_SCRIPT_SOURCE"

// maxSource is the longest script accepted: Linux caps one environment
// string, NAME=VALUE, at 128 KiB.
const maxSource = 128<<10 - len(sourceVar) - 2

// runScript writes the script ($SOULSTACK_SCRIPT_SOURCE) to a private
// temporary file, removes the variable and runs the script with the
// interpreter (the arguments); standard input, which holds the event,
// passes through to the script.
const runScript = `t=$(mktemp) || exit 125
trap 'rm -f -- "$t"' EXIT
printf '%s' "$SOULSTACK_SCRIPT_SOURCE" > "$t"
unset SOULSTACK_SCRIPT_SOURCE
"$@" "$t"`

var _ module.CodeChecker = (*Ran)(nil)

// CheckRunsCode reports whether a check of params runs the script: it
// does with check: true, and, conservatively, whenever that cannot be
// read (params not known before the step runs).
func (m *Ran) CheckRunsCode(params json.RawMessage) bool {
	var p struct {
		Check *bool `json:"check"`
	}
	if params == nil || json.Unmarshal(params, &p) != nil {
		return true
	}
	return p.Check != nil && *p.Check
}

// checkVar is set to 1 in the environment of a script that a check run
// asks (check: true): the script must change nothing and say, in its JSON
// output's "changed", whether a real run would.
const checkVar = "SOULSTACK_CHECK"

// Check runs a script that declares check: true with SOULSTACK_CHECK=1
// and reads its verdict; any other script is unknown, since what it does
// is known only when it runs.
func (m *Ran) Check(ctx context.Context, run module.RunInfo, raw json.RawMessage, t module.Target) (module.Prediction, error) {
	var p RanParams
	if err := module.DecodeParams(raw, &p); err != nil {
		return module.Prediction{}, err
	}
	if !p.Check {
		return module.Prediction{Unknown: "core.script.ran: what a script changes is known only when it runs (a script that honours SOULSTACK_CHECK=1 declares check: true)"}, nil
	}
	out, changed, err := execute(ctx, p, t, true)
	if err != nil {
		return module.Prediction{}, err
	}
	obj, _ := out.(map[string]any)
	if _, said := obj["changed"].(bool); !said {
		return module.Prediction{Unknown: "the script's check answer has no \"changed\" boolean"}, nil
	}
	pred := module.Prediction{WouldChange: changed}
	if changed {
		pred.Changes = []client.Change{{Kind: "script", Action: "run", Name: scriptName(p)}}
	}
	return pred, nil
}

// scriptName names the script in a plan.
func scriptName(p RanParams) string {
	if p.Path != "" {
		return p.Path
	}
	return head(strings.TrimSpace(p.Source), 60)
}

// Run runs the script with the event as one JSON line on standard input.
// Its standard output, which must be JSON, is the output (a top-level
// "changed" boolean, when present, says whether it changed something;
// otherwise a script that ran counts as a change). A non-zero exit status
// fails the target with code script.failed and its stderr; a zero exit
// with standard output that is not JSON fails it with
// script.output_invalid, the text kept in the output as {"stdout": …}.
func (*Ran) Run(ctx context.Context, run module.RunInfo, raw json.RawMessage, t module.Target) (module.Result, error) {
	var p RanParams
	if err := module.DecodeParams(raw, &p); err != nil {
		return module.Result{}, err
	}
	output, changed, err := execute(ctx, p, t, false)
	return module.Result{Changed: changed, Output: output}, err
}

// execute runs the script (asked for a check when check is set) and
// returns its JSON output and whether it says it changed something.
func execute(ctx context.Context, p RanParams, t module.Target, check bool) (any, bool, error) {
	src := p.Source
	if p.Path != "" {
		b, err := module.ReadKeeperFile(ctx, t, p.Path)
		if err != nil {
			return nil, false, err
		}
		src = string(b)
	}
	if len(src) > maxSource {
		return nil, false, &module.Error{Code: "script.too_large", Message: fmt.Sprintf("the script is %d bytes; at most %d are accepted", len(src), maxSource)}
	}
	interp := strings.Fields(p.Interpreter)
	if len(interp) == 0 {
		interp = []string{"/bin/sh"}
	}
	event := []byte("{}")
	if p.Event != nil {
		b, err := json.Marshal(p.Event)
		if err != nil {
			return nil, false, &module.Error{Code: "script.bad_event", Message: err.Error()}
		}
		event = b
	}
	argv := append([]string{"/bin/sh", "-c", runScript, "sh"}, interp...)
	env := make(map[string]string, len(p.Env)+1)
	for k, v := range p.Env {
		env[k] = v
	}
	env[sourceVar] = src
	delete(env, checkVar)
	if check {
		env[checkVar] = "1"
	}
	res, err := t.Exec(ctx, module.Command{Argv: argv, Env: env, Stdin: append(event, '\n')})
	if err != nil {
		return nil, false, err
	}
	out := strings.TrimSpace(string(res.Stdout))
	var output any
	var jsonErr error
	if out != "" {
		if jsonErr = json.Unmarshal([]byte(out), &output); jsonErr != nil {
			// Kept for whoever reads the run, masked like every output.
			output = map[string]any{"stdout": string(res.Stdout)}
		}
	}
	changed := true
	if m, ok := output.(map[string]any); ok && jsonErr == nil {
		if c, ok := m["changed"].(bool); ok {
			changed = c
		}
	}
	if res.ExitCode != 0 {
		msg := strings.TrimSpace(string(res.Stderr))
		if msg == "" {
			msg = "(no stderr)"
		}
		return output, changed, &module.Error{
			Code:    CodeFailed,
			Message: fmt.Sprintf("exit status %d: %s", res.ExitCode, lastLines(msg)),
		}
	}
	if jsonErr != nil {
		return output, changed, &module.Error{
			Code:    CodeOutputInvalid,
			Message: fmt.Sprintf("the script exited 0 but its standard output is not JSON (%v); it begins %q", jsonErr, head(out, 80)),
		}
	}
	return output, changed, nil
}

// head returns at most n bytes of s, cut at a rune boundary.
func head(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func lastLines(s string) string {
	lines := strings.Split(s, "\n")
	if len(lines) > 10 {
		lines = lines[len(lines)-10:]
	}
	return strings.Join(lines, "\n")
}
