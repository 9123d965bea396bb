package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/soulstack/soulstack/client"
)

// maxScenarioBytes is the largest scenario file sent to the keeper, which
// refuses larger request bodies.
const maxScenarioBytes = 1 << 20

// runLong is soulctl run's help.
const runLong = `Run the scenario in FILE (YAML) on the keeper and show it live: on a terminal,
one line per step updated as hosts report (ok, changed, failed, skipped,
unreachable), with counts and elapsed time; otherwise one plain line per event.
At the end a recap counts each soul's results and the run's outputs are printed.

The keeper validates the scenario and its input before anything runs and
names every problem as file:line:column. The run is durable: interrupting
soulctl does not stop it (soulctl runs cancel ID does).

Input: --input-file reads a JSON object ("-" for stdin); each --input key=value
sets one key on top of it. A value that is valid JSON is taken as JSON
(count=3, packages='["git","curl"]', debug=true), anything else as a string
(name=web); quote a number to pass it as a string: version='"1.10"'.

--check makes a check run: every module asks its deciding questions only
and says per soul what an apply would change (would change, or unknown and
why), changing nothing on any soul or cloud; the plan is printed after the
recap, with unified diffs of files under --diff.

Exit codes: 0 when the run Succeeded, 2 when it Failed or was Cancelled (or
on a usage error), 3 when --wait-timeout passed first (the run goes on), 4
when the keeper refused the scenario or its input, 1 for any other error.
With --check --exit-code (terraform plan -detailed-exitcode): 0 nothing
would change, 2 changes pending (or unknown), 1 the check failed.
With -o json nothing is shown while the run goes; the finished run is
printed as JSON.`

func (a *app) runCommand() *cobra.Command {
	var (
		inputs      []string
		project     string
		inputFile   string
		key         string
		timeout     string
		waitTimeout string
		detach      bool
		check       checkOptions
	)
	cmd := &cobra.Command{
		Use:   "run FILE",
		Short: "Run a scenario and show its progress",
		Long:  runLong,
		Example: `  soulctl run hello.yaml
  soulctl run install.yaml --input packages='["git","curl"]' --input-file in.json --key install-7 --timeout 30m
  soulctl run hello.yaml --detach
  soulctl run install.yaml --check --diff --exit-code`,
		Args: exactArgs("FILE"),
		RunE: a.action(func(cmd *cobra.Command, args []string, p *printer) error {
			var serverTimeout, wait time.Duration
			var err error
			if timeout != "" {
				if serverTimeout, err = duration("timeout", timeout); err != nil {
					return err
				}
			}
			if waitTimeout != "" {
				if wait, err = duration("wait-timeout", waitTimeout); err != nil {
					return err
				}
			}
			in, err := runRequest(args[0], inputs, inputFile, a.env.Stdin)
			if err != nil {
				return err
			}
			in.Key = key
			in.Project = project
			if check.check {
				in.Mode = client.RunCheck
			} else if check.diff || check.exitCode {
				return usageErrorf("--diff and --exit-code go with --check")
			}
			if serverTimeout > 0 {
				in.Timeout = serverTimeout.String()
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			if err := a.checkLocally(cmd.Context(), c, in); err != nil {
				return err
			}
			run, created, err := c.RunCreate(cmd.Context(), in)
			if err != nil {
				return a.refused(err, in.File)
			}
			if !created {
				fmt.Fprintf(a.env.Stderr, "key %q already started run %s with this scenario and input: showing that run\n", key, run.ID)
			}
			if detach {
				return p.print(run, text(run.ID+"\n"))
			}
			return a.waitRun(cmd.Context(), c, run, p, wait, "--wait-timeout", true, check)
		}),
	}
	fs := cmd.Flags()
	fs.StringArrayVar(&inputs, "input", nil, "input key=value; the value is JSON when it parses as JSON, else a string (repeatable)")
	fs.StringVar(&inputFile, "input-file", "", "JSON object with the input (- for stdin); --input keys override it")
	fs.StringVar(&key, "key", "", "re-run key of this token: the same key with the same scenario and input shows the existing run instead of starting another")
	fs.StringVar(&timeout, "timeout", "", "server-side timeout of the run, e.g. 15m (the keeper's default when empty)")
	fs.StringVar(&waitTimeout, "wait-timeout", "", "stop waiting after this long and exit 3; the run goes on (default: wait until it ends)")
	fs.BoolVar(&detach, "detach", false, "print the run's id as soon as it is accepted and exit")
	fs.StringVar(&project, "project", "", "the project the run acts in: its souls, providers and profiles (a keeper-wide token's choice; default: the default project, or the token's own)")
	fs.BoolVar(&check.check, "check", false, "check run: say what an apply would change, change nothing")
	fs.BoolVar(&check.diff, "diff", false, "with --check: show files' changes as unified diffs")
	fs.BoolVar(&check.exitCode, "exit-code", false, "with --check: exit 0 when nothing would change, 2 when changes are pending, another code on error (soulctl --help)")
	return cmd
}

// runRequest reads the scenario file and builds the run's input.
func runRequest(path string, pairs []string, inputFile string, stdin io.Reader) (client.RunCreate, error) {
	input, err := runInput(pairs, inputFile, stdin)
	if err != nil {
		return client.RunCreate{}, err
	}
	in, err := readScenario(path)
	in.Input = input
	return in, err
}

// readScenario reads a scenario file (at most 1 MiB).
func readScenario(path string) (client.RunCreate, error) {
	f, err := os.Open(path)
	if err != nil {
		return client.RunCreate{}, usageErrorf("read scenario: %v", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxScenarioBytes+1))
	if err != nil {
		return client.RunCreate{}, usageErrorf("read scenario: %v", err)
	}
	name := filepath.Base(path)
	if len(data) > maxScenarioBytes {
		return client.RunCreate{}, &exitError{code: ExitInvalid, msg: fmt.Sprintf("%s: the scenario is larger than 1 MiB; nothing ran", name)}
	}
	return client.RunCreate{Scenario: string(data), File: name}, nil
}

// runInput merges the JSON object of --input-file with the --input pairs,
// the pairs winning.
func runInput(pairs []string, inputFile string, stdin io.Reader) (map[string]any, error) {
	var input map[string]any
	if inputFile != "" {
		var err error
		if input, err = jsonObject("input-file", "@"+inputFile, stdin); err != nil {
			return nil, err
		}
	}
	seen := map[string]bool{}
	for _, kv := range pairs {
		k, v, ok := strings.Cut(kv, "=")
		switch {
		case !ok || k == "":
			return nil, usageErrorf("--input: want key=value, got %q", kv)
		case seen[k]:
			return nil, usageErrorf("--input: key %q given twice", k)
		}
		seen[k] = true
		if input == nil {
			input = map[string]any{}
		}
		input[k] = inputValue(v)
	}
	return input, nil
}

// inputValue is v decoded as JSON when it is one JSON value, else v as a
// string.
func inputValue(v string) any {
	dec := json.NewDecoder(strings.NewReader(v))
	dec.UseNumber()
	var x any
	if err := dec.Decode(&x); err != nil {
		return v
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return v
	}
	return x
}

// refused reports a run the keeper did not accept. A 422 (the scenario or
// its input is invalid) lists every problem as "location: code: message"
// and exits ExitInvalid.
func (a *app) refused(err error, file string) error {
	var p *client.Problem
	if !errors.As(err, &p) || p.Status != http.StatusUnprocessableEntity {
		return err
	}
	w := a.env.Stderr
	if p.Code == "scenario.invalid" && len(p.Errors) > 0 {
		fmt.Fprintf(w, "error: %s: %s has %d problem(s); nothing ran\n", p.Code, file, len(p.Errors))
	} else {
		fmt.Fprintf(w, "error: %s: %s\n", p.Code, firstNonEmpty(p.Detail, p.Title))
	}
	for _, e := range p.Errors {
		if e.Code != "" {
			fmt.Fprintf(w, "%s: %s: %s\n", e.Location, e.Code, e.Message)
			continue
		}
		fmt.Fprintf(w, "%s: %s\n", e.Location, e.Message)
	}
	return &exitError{code: ExitInvalid}
}

// waitRun waits for run to finish, showing its events when showEvents is
// set (live on a terminal), then prints the recap, or with -o json the
// finished run. It stops waiting after wait (none when 0), naming flag in
// the message. The error carries the exit code of the run's phase.
func (a *app) waitRun(ctx context.Context, c *client.Client, run *client.Run, p *printer, wait time.Duration, flag string, showEvents bool, check checkOptions) error {
	wctx := ctx
	if wait > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, wait)
		defer cancel()
	}
	var (
		final *client.Run
		err   error
	)
	if p.json || !showEvents {
		final, err = c.RunWait(wctx, run.ID)
	} else {
		err = a.followEvents(wctx, c, run, p.w)
		if err == nil {
			final, err = c.RunGet(wctx, run.ID)
		}
	}
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return &exitError{code: ExitFailure, msg: fmt.Sprintf("interrupted; run %s goes on in the keeper (soulctl runs cancel %s stops it)", run.ID, run.ID)}
	case wctx.Err() != nil:
		if p.json && final != nil {
			_ = p.print(final, nil)
		}
		return &exitError{code: ExitWaitTimeout, msg: fmt.Sprintf("run %s has not finished after %s (%s); it goes on in the keeper: soulctl runs wait %s", run.ID, wait, flag, run.ID)}
	default:
		return err
	}
	out := recap(final)
	if final.Mode == client.RunCheck {
		out += planText(final, check.diff)
	}
	if err := p.print(final, text(out)); err != nil {
		return err
	}
	if final.Mode == client.RunCheck && check.exitCode {
		return checkExit(final)
	}
	return phaseExit(final, p.json)
}

// phaseExit is nil for a Succeeded run and an ExitRunFailed error
// otherwise. The error prints the phase to stderr only when asked
// (with -o json): a recap on stdout has already said it.
func phaseExit(r *client.Run, say bool) error {
	if r.Phase == client.PhaseSucceeded {
		return nil
	}
	if !say {
		return &exitError{code: ExitRunFailed}
	}
	msg := fmt.Sprintf("run %s %s", r.ID, r.Phase)
	if r.Error != nil {
		msg += ": " + errorText(r.Error)
	}
	return &exitError{code: ExitRunFailed, msg: msg}
}

// followEvents shows a run's events until it has finished: the live view
// when w is a terminal, plain lines otherwise. A blank line separates them
// from the recap that follows.
func (a *app) followEvents(ctx context.Context, c *client.Client, run *client.Run, w io.Writer) error {
	if t := terminalOf(w, a.env.Getenv); t != nil {
		v := newLiveView(t, newProgress(run.ID, run.Name))
		stop := v.start()
		err := c.RunEvents(ctx, run.ID, 0, func(ev client.RunEvent) error {
			v.event(ev)
			return nil
		})
		stop()
		if err == nil {
			fmt.Fprintln(w)
		}
		return err
	}
	err := c.RunEvents(ctx, run.ID, 0, func(ev client.RunEvent) error {
		_, err := fmt.Fprintln(w, eventLine(ev))
		return err
	})
	if err == nil {
		fmt.Fprintln(w)
	}
	return err
}
