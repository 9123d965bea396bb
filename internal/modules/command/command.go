// Package command declares core.command.ran, which runs one command on
// souls, with Ansible-like creates/removes guards.
package command

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/module"
	"github.com/soulstack/soulstack/internal/probe"
)

// RanID is the ID of the Ran state.
const RanID module.ID = "core.command.ran"

func init() { module.Register(new(Ran)) }

// Ran is the core.command.ran state.
type Ran struct{}

var (
	_ module.Module    = (*Ran)(nil)
	_ module.Validator = (*Ran)(nil)
	_ module.Checker   = (*Ran)(nil)
)

// RanParams are the params of core.command.ran, decoded strictly from the
// step's params.
type RanParams struct {
	Cmd     string            `json:"cmd,omitempty"`
	Argv    []string          `json:"argv,omitempty"`
	Creates string            `json:"creates,omitempty"`
	Removes string            `json:"removes,omitempty"`
	Chdir   string            `json:"chdir,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Stdin   string            `json:"stdin,omitempty"`
}

// Info returns the declaration of core.command.ran.
func (*Ran) Info() module.Info {
	return module.Info{
		ID:      RanID,
		Summary: "Run one command on each target soul: a shell string (`cmd`) or a program and its arguments (`argv`).",
		Description: "The command runs with LC_ALL=C. `creates` and `removes` are guards, as in Ansible: " +
			"the command is skipped when the `creates` path already exists, or when the `removes` path does not. " +
			"To put a value into `cmd`, quote it for the shell with `quote()`: `${ quote(input.dir) }` stays one literal word " +
			"whatever quotes, spaces, `;` or newlines it holds.",
		Side:       module.SideSoul,
		Idempotent: false,
		NeedsRoot:  false,
		Params: []module.Param{
			{Name: "cmd", Type: module.TypeString, Doc: "Command line run by /bin/sh -c."},
			{Name: "argv", Type: module.TypeList, Elem: module.TypeString, Doc: "Program and arguments, run without a shell."},
			{Name: "creates", Type: module.TypeString, Doc: "Absolute path; when it exists the command is skipped."},
			{Name: "removes", Type: module.TypeString, Doc: "Absolute path; when it does not exist the command is skipped."},
			{Name: "chdir", Type: module.TypeString, Doc: "Working directory of the command."},
			{Name: "env", Type: module.TypeMap, Elem: module.TypeString, Doc: "Extra environment variables; sent over the connection's input, never in a command line."},
			{Name: "stdin", Type: module.TypeString, Doc: "Data written to the command's standard input, then end of file; without it the input is empty."},
		},
		Exclusive: []module.Group{{Params: []string{"cmd", "argv"}, Required: true}},
		Output: []module.Field{
			{Name: "rc", Type: "int", Doc: "Exit status of the command."},
			{Name: "stdout", Type: "string", Doc: "Standard output."},
			{Name: "stderr", Type: "string", Doc: "Standard error."},
			{Name: "skipped", Type: "bool", Doc: "True when a creates/removes guard skipped the command."},
		},
		ChangesWhen:   "The command ran: a command is assumed to change something (override with `changed_when`).",
		UnchangedWhen: "A `creates` or `removes` guard skipped the command.",
		CheckMode: "Runs only the guards (`test -e`): a guard that skips the command means no change; one that lets it run means it would run, which apply reports as a change. " +
			"Without `creates` or `removes` the target is unknown (whether the command changes anything is known only when it runs), unless `changed_when` decides without the command's result (`changed_when: false`). The command itself never runs.",
		Example: `- name: hello
  on: web-1.local.test
  module: core.command.ran
  params:
    cmd: echo hello > /tmp/hello
    creates: /tmp/hello
- name: list_upload_dir
  on: web-1.local.test
  module: core.command.ran
  params:
    cmd: ls -l -- ${ quote(input.upload_dir) }
- name: load_schema
  on: web-1.local.test
  module: core.command.ran
  params:
    argv: [psql, --set, ON_ERROR_STOP=1]
    stdin: ${ input.schema_sql }
    env:
      PGPASSWORD: ${ input.db_password }`,
		Notes: []string{
			"`cmd` and `argv` are visible to every user of the soul in its process list (`/proc/*/cmdline`) while the command runs: " +
				"pass secrets in `env` or `stdin`, which never appear in a command line.",
			"A non-zero exit status fails the target; its stderr is in the error message.",
			"Not idempotent: after a keeper crash an interrupted command is not repeated. Use `creates`/`removes` guards to make reruns safe.",
		},
	}
}

// ValidateParams checks that argv is not empty and that the guards are
// absolute paths.
func (*Ran) ValidateParams(v module.Values) error {
	var errs []error
	if argv, ok := v.Get("argv"); ok {
		if l, _ := argv.([]any); len(l) == 0 {
			errs = append(errs, module.Invalid("argv", "param \"argv\" must hold at least the program to run"))
		}
	}
	if cmd, ok := v.Get("cmd"); ok {
		if s, _ := cmd.(string); strings.TrimSpace(s) == "" {
			errs = append(errs, module.Invalid("cmd", "param \"cmd\" must not be empty"))
		}
	}
	for _, name := range []string{"creates", "removes"} {
		if p, ok := v.Get(name); ok {
			if s, _ := p.(string); !strings.HasPrefix(s, "/") {
				errs = append(errs, module.Invalid(name, "param %q must be an absolute path, got %q", name, s))
			}
		}
	}
	return errors.Join(errs...)
}

// skippedOutput is the output of a command a guard skipped.
func skippedOutput() map[string]any {
	return map[string]any{"rc": 0, "stdout": "", "stderr": "", "skipped": true}
}

// guarded reports whether a creates or removes guard skips the command:
// one probe (test -e, answered natively by an executor) per guard given.
func guarded(ctx context.Context, p RanParams, t module.Target) (bool, error) {
	for _, g := range []struct {
		path     string
		skipWhen bool // skip when the path exists (creates) or not (removes)
	}{{p.Creates, true}, {p.Removes, false}} {
		if g.path == "" {
			continue
		}
		argv, req := probe.Command(probe.KindFileExists, g.path)
		res, err := t.Exec(ctx, module.Command{Argv: argv, Probe: req, ReadOnly: true})
		if err != nil {
			return false, err
		}
		if (res.ExitCode == 0) == g.skipWhen {
			return true, nil
		}
	}
	return false, nil
}

// Run runs the command unless a guard skips it. A non-zero exit status
// fails the target with code command.failed.
func (*Ran) Run(ctx context.Context, run module.RunInfo, raw json.RawMessage, t module.Target) (module.Result, error) {
	var p RanParams
	if err := module.DecodeParams(raw, &p); err != nil {
		return module.Result{}, err
	}
	if skip, err := guarded(ctx, p, t); err != nil || skip {
		return module.Result{Changed: false, Output: skippedOutput()}, err
	}
	argv := p.Argv
	if p.Cmd != "" {
		argv = []string{"/bin/sh", "-c", p.Cmd}
	}
	res, err := t.Exec(ctx, module.Command{Argv: argv, Env: p.Env, Dir: p.Chdir, Stdin: []byte(p.Stdin)})
	if err != nil {
		return module.Result{}, err
	}
	out := map[string]any{"rc": res.ExitCode, "stdout": string(res.Stdout), "stderr": string(res.Stderr), "skipped": false}
	if res.ExitCode != 0 {
		return module.Result{Changed: true, Output: out}, &module.Error{
			Code:    "command.failed",
			Message: fmt.Sprintf("exit status %d: %s", res.ExitCode, Tail(res.Stderr, res.Stdout)),
		}
	}
	return module.Result{Changed: true, Output: out}, nil
}

// Check runs only the guards: a guard that skips the command means
// nothing would change; one that lets it run means the command would run,
// which apply reports as a change. Without a guard a command is unknown:
// whether it changes anything is known only when it runs (changed_when
// that needs none of its result decides then).
func (*Ran) Check(ctx context.Context, run module.RunInfo, raw json.RawMessage, t module.Target) (module.Prediction, error) {
	var p RanParams
	if err := module.DecodeParams(raw, &p); err != nil {
		return module.Prediction{}, err
	}
	name := p.Cmd
	if name == "" {
		name = strings.Join(p.Argv, " ")
	}
	run1 := []client.Change{{Kind: "command", Action: "run", Name: name}}
	if p.Creates == "" && p.Removes == "" {
		return module.Prediction{WouldChange: true, Changes: run1,
			Unknown: "core.command.ran without creates or removes: whether the command changes anything is known only when it runs"}, nil
	}
	skip, err := guarded(ctx, p, t)
	if err != nil {
		return module.Prediction{}, err
	}
	if skip {
		return module.Prediction{Output: skippedOutput(), OutputKnown: true}, nil
	}
	return module.Prediction{WouldChange: true, Changes: run1}, nil
}

// Tail returns the last lines of the first non-empty stream, for error
// messages.
func Tail(streams ...[]byte) string {
	for _, s := range streams {
		t := strings.TrimSpace(string(s))
		if t == "" {
			continue
		}
		lines := strings.Split(t, "\n")
		if len(lines) > 5 {
			lines = lines[len(lines)-5:]
		}
		t = strings.Join(lines, "\n")
		if len(t) > 2000 {
			t = "…" + t[len(t)-2000:]
		}
		return t
	}
	return "(no output)"
}
