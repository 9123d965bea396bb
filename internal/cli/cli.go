// Package cli is soulctl, the operator CLI of Soul Stack: one file per
// command, all of them talking to the keeper through the client package
// only, and printing through one printer that knows table and JSON.
//
// Exit codes: 0 on success, 1 when the keeper refuses a request, cannot be
// reached or reports a failure (such as a broken audit chain), 2 on a usage
// error (unknown command or flag, missing or malformed argument). The
// commands that wait for a run (run, runs wait) exit 0 only when the run
// Succeeded, 2 when it Failed or was Cancelled, 3 when the wait timed out
// and 4 when the keeper refused the scenario as invalid.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/version"
)

// Environment variables soulctl reads.
const (
	EnvKeeper        = "SOULSTACK_KEEPER"
	EnvToken         = "SOULSTACK_TOKEN"
	EnvCA            = "SOULSTACK_CA"
	EnvCAFingerprint = "SOULSTACK_CA_FINGERPRINT"
)

// AdminTokenFile is the token file soulctl falls back to, relative to the
// working directory: where `keeper serve` writes its first admin token when
// started with the default data directory.
const AdminTokenFile = ".keeper/admin.token"

// Exit codes: one meaning each, the table soulctl --help prints
// (exitCodes) and README's "soulctl exit codes".
const (
	ExitOK      = 0
	ExitFailure = 1 // any failure not below
	// ExitChanges (2): with --exit-code, changes are pending (run --check)
	// or a soul or VM has drifted (drift, drift cloud): ExitChangesPending,
	// ExitDrift.
	// ExitWaitTimeout: the run had not finished when the wait ended; it
	// goes on in the keeper.
	ExitWaitTimeout = 3
	// ExitInvalid: the keeper (or soulctl validate) refused the scenario
	// or the input (400, 422); nothing changed.
	ExitInvalid = 4
	// ExitRunFailed: the run ended Failed or Cancelled.
	ExitRunFailed = 5
	// ExitNotFound: what the command names does not exist (404).
	ExitNotFound = 6
	// ExitUsage: soulctl was called wrongly (sysexits' EX_USAGE); nothing
	// was sent.
	ExitUsage = 64
	// ExitUnreachable: the keeper could not be reached or its TLS
	// certificate not trusted (EX_UNAVAILABLE).
	ExitUnreachable = 69
	// ExitAuth: no token, a token the keeper refuses, or one without the
	// permission (401, 403; EX_NOPERM).
	ExitAuth = 77
)

// exitCodes is the table of exit codes for soulctl --help.
const exitCodes = `Exit codes:
  0   success
  1   a failure not listed below
  2   with --exit-code: changes pending (run --check), drift found (drift, drift cloud)
  3   the wait ended before the run did; it goes on in the keeper
  4   the scenario or input is invalid (validate, or the keeper's 400/422); nothing changed
  5   the run ended Failed or Cancelled
  6   not found (404)
  64  usage: soulctl was called wrongly; nothing was sent
  69  the keeper cannot be reached, or its certificate is not trusted
  77  no token, a token the keeper refuses, or one without the permission (401, 403)`

// exitCodeOf is the exit code of a command's error that is neither an
// exitError nor a usage error.
func exitCodeOf(err error) int {
	var p *client.Problem
	var ue *url.Error
	var ce *client.CertificateError
	switch {
	case errors.As(err, &ce):
		return ExitUnreachable
	case errors.As(err, &p):
		switch p.Status {
		case http.StatusUnauthorized, http.StatusForbidden:
			return ExitAuth
		case http.StatusNotFound:
			return ExitNotFound
		case http.StatusBadRequest, http.StatusUnprocessableEntity:
			return ExitInvalid
		}
	case errors.Is(err, context.Canceled):
		return ExitFailure // interrupted
	case errors.As(err, &ue):
		return ExitUnreachable
	}
	return ExitFailure
}

// Env is what soulctl takes from its process: standard streams and
// environment variables.
type Env struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	Getenv func(string) string
}

// Main runs soulctl with the process's arguments, streams and environment,
// stopping on SIGINT or SIGTERM, and returns the exit code.
func Main() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return Run(ctx, os.Args[1:], Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv})
}

// Run executes soulctl with args (without the program name) and returns
// the exit code. Errors are printed to env.Stderr.
func Run(ctx context.Context, args []string, env Env) int {
	if env.Getenv == nil {
		env.Getenv = func(string) string { return "" }
	}
	if env.Stdin == nil {
		env.Stdin = strings.NewReader("")
	}
	a := &app{env: env}
	root := a.rootCommand()
	root.SetArgs(args)
	root.SetIn(env.Stdin)
	root.SetOut(env.Stdout)
	root.SetErr(env.Stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	var xe *exitError
	if errors.As(err, &xe) {
		if xe.msg != "" {
			fmt.Fprintf(env.Stderr, "error: %s\n", xe.msg)
		}
		return xe.code
	}
	var ue *usageError
	if !a.running || errors.As(err, &ue) {
		fmt.Fprintf(env.Stderr, "error: %v\n", err)
		if cmd == nil {
			cmd = root
		}
		fmt.Fprintf(env.Stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		return ExitUsage
	}
	a.reportError(err)
	return exitCodeOf(err)
}

// app holds the global options and the streams of one soulctl execution.
type app struct {
	env           Env
	keeperURL     string
	token         string
	output        string
	contextName   string         // --context
	context       *keeperContext // the context in use (connection)
	jq            string
	caFile        string
	caFingerprint string

	// running is set once a command's action starts: errors before that
	// come from argument parsing and are usage errors.
	running bool
	// resolvedURL and tokenSource describe the connection for messages.
	resolvedURL string
	tokenSource string
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "soulctl",
		Short: "Operate a Soul Stack keeper",
		Long: `soulctl operates a Soul Stack keeper through its Operator API: cloud
providers, VM profiles, souls (managed hosts), API tokens, the audit log, the
module catalog, and runs of scenarios.

The keeper is found with --keeper, a context named with --context (or
` + EnvContext + `), ` + EnvKeeper + `, the current context (soulctl context), in
that order (default ` + client.DefaultURL + `). The API token comes from --token;
` + EnvToken + ` (never sent to a context's keeper) or the context's token file;
soulctl login's token for the keeper; and, for the keeper whose data dir is
./.keeper (its keeper.url names it), ./` + AdminTokenFile + `.

An https:// keeper that uses its own CA (as it does off loopback unless
given a certificate) is trusted with --ca-file or ` + EnvCA + ` (its
<data-dir>/tls/ca.crt), or by pinning the CA fingerprint it logs with
--ca-fingerprint or ` + EnvCAFingerprint + `.

` + exitCodes,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version.String(),
	}
	// soulctl --version prints what soulctl version --client does.
	root.SetVersionTemplate("soulctl {{.Version}} (" + runtime.Version() + ")\n")
	asGroup(root)
	fs := root.PersistentFlags()
	fs.StringVar(&a.keeperURL, "keeper", "", "keeper URL (env "+EnvKeeper+", default "+client.DefaultURL+")")
	fs.StringVar(&a.token, "token", "", "API token (env "+EnvToken+", else soulctl login's for this keeper, else ./"+AdminTokenFile+" when present)")
	fs.StringVarP(&a.output, "output", "o", "table", "output format: table, json, yaml, jsonpath=EXPR (RFC 9535), go-template=TEMPLATE")
	fs.StringVar(&a.jq, "jq", "", "print what this jq expression makes of the JSON output (each string raw, anything else as JSON)")
	fs.StringVar(&a.contextName, "context", "", "use this context's keeper (env "+EnvContext+"; soulctl context)")
	fs.StringVar(&a.caFile, "ca-file", "", "PEM file of the CA to trust for an https:// keeper (env "+EnvCA+")")
	fs.StringVar(&a.caFingerprint, "ca-fingerprint", "", "pin the keeper's CA by its SHA-256 fingerprint, sha256:… (env "+EnvCAFingerprint+")")
	root.AddCommand(
		a.providerCommand(),
		a.profileCommand(),
		a.soulCommand(),
		a.tokenCommand(),
		a.auditCommand(),
		a.modulesCommand(),
		a.runCommand(),
		a.validateCommand(),
		a.runsCommand(),
		a.driftCommand(),
		a.cloudCommand(),
		a.versionCommand(),
		a.mcpCommand(),
		a.loginCommand(),
		a.logoutCommand(),
		a.whoamiCommand(),
		a.projectCommand(),
		a.credentialCommand(),
		a.contextCommand(),
	)
	a.addCompletions(root)
	return root
}

// action wraps a command's work: it marks the execution as running, checks
// the output format and passes a printer.
func (a *app) action(f func(cmd *cobra.Command, args []string, p *printer) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		a.running = true
		p, err := newPrinter(cmd.OutOrStdout(), a.output, a.jq)
		if err != nil {
			return err
		}
		return f(cmd, args, p)
	}
}

// client returns a client for the configured keeper and token.
func (a *app) client() (*client.Client, error) {
	token, opts, err := a.connection()
	if err != nil {
		return nil, err
	}
	c, err := client.NewWithOptions(a.resolvedURL, token, opts)
	if err != nil {
		if opts.CAFile != "" {
			return nil, usageErrorf("--ca-file: %v", err)
		}
		return nil, usageErrorf("--keeper: %v", err)
	}
	return c, nil
}

// connection resolves the keeper's URL (into a.resolvedURL), the token
// and the trust options from the flags and the environment.
func (a *app) connection() (string, client.Options, error) {
	kc, err := a.keeperContext()
	if err != nil {
		return "", client.Options{}, err
	}
	// A context gives the keeper unless --keeper does, or, for the
	// current context (not one named with --context or SOULSTACK_CONTEXT),
	// SOULSTACK_KEEPER.
	a.context = nil
	named := a.contextName != "" || a.env.Getenv(EnvContext) != ""
	if kc != nil && a.keeperURL == "" && (named || a.env.Getenv(EnvKeeper) == "") {
		a.context = kc
	}
	var ctxCA, ctxFingerprint string
	if a.context != nil {
		a.resolvedURL = a.context.Keeper
		ctxCA, ctxFingerprint = a.context.CAFile, a.context.CAFingerprint
	} else {
		a.resolvedURL = firstNonEmpty(a.keeperURL, a.env.Getenv(EnvKeeper), client.DefaultURL)
	}
	token, source, err := a.resolveToken()
	if err != nil {
		return "", client.Options{}, err
	}
	a.tokenSource = source
	opts := client.Options{
		CAFile:        firstNonEmpty(a.caFile, a.env.Getenv(EnvCA), ctxCA),
		CAFingerprint: firstNonEmpty(a.caFingerprint, a.env.Getenv(EnvCAFingerprint), ctxFingerprint),
	}
	if opts.CAFingerprint != "" {
		if _, err := client.ParseFingerprint(opts.CAFingerprint); err != nil {
			return "", client.Options{}, usageErrorf("--ca-fingerprint: %v", err)
		}
	}
	return token, opts, nil
}

// resolveToken picks the API token: the flag; the environment, unless
// the keeper is a context's (the variable may be another keeper's), whose
// token file comes then; soulctl login's for the keeper; then the admin
// token file of a keeper started in the working directory.
func (a *app) resolveToken() (token, source string, err error) {
	if a.token != "" {
		return a.token, "--token", nil
	}
	if a.context != nil {
		if f := a.context.TokenFile; f != "" {
			b, err := os.ReadFile(f)
			if err != nil {
				return "", "", fmt.Errorf("context %q: read its token file: %w", a.context.Name, err)
			}
			return strings.TrimSpace(string(b)), fmt.Sprintf("context %q (%s)", a.context.Name, f), nil
		}
	} else if t := a.env.Getenv(EnvToken); t != "" {
		return t, EnvToken, nil
	}
	if t, ok := a.loggedInToken(a.resolvedURL); ok {
		return t, "soulctl login", nil
	}
	if !a.localKeeper() {
		if _, err := os.Stat(AdminTokenFile); err == nil {
			fmt.Fprintf(a.env.Stderr, "notice: ./%s is not sent to %s: it is the token of the keeper whose data dir is ./.keeper, and that keeper's %s names another URL (or is missing)\n", AdminTokenFile, a.resolvedURL, KeeperURLFile)
		}
		return "", "", nil
	}
	b, err := os.ReadFile(AdminTokenFile)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "", "", nil
	case err != nil:
		return "", "", fmt.Errorf("read API token: %w", err)
	}
	return strings.TrimSpace(string(b)), "./" + AdminTokenFile, nil
}

// KeeperURLFile is where a keeper records the URL it listens at, in its
// data dir: soulctl reads AdminTokenFile only for that keeper.
const KeeperURLFile = ".keeper/keeper.url"

// localKeeper reports whether the keeper soulctl talks to is the one
// whose data dir is ./.keeper: on a loopback address, at the URL that
// keeper recorded when it started. A working directory's admin token is
// never sent anywhere else.
func (a *app) localKeeper() bool {
	u, err := url.Parse(a.resolvedURL)
	if err != nil {
		return false
	}
	ip := net.ParseIP(u.Hostname())
	if ip == nil && u.Hostname() != "localhost" || ip != nil && !ip.IsLoopback() {
		return false
	}
	b, err := os.ReadFile(KeeperURLFile)
	if err != nil {
		return false
	}
	rec, err := url.Parse(strings.TrimSpace(string(b)))
	return err == nil && rec.Scheme == u.Scheme && rec.Port() == u.Port() &&
		(rec.Hostname() == u.Hostname() || isLoopbackHost(rec.Hostname()) && isLoopbackHost(u.Hostname()))
}

func isLoopbackHost(h string) bool {
	ip := net.ParseIP(h)
	return h == "localhost" || ip != nil && ip.IsLoopback()
}

// reportError prints a command's failure: a problem from the keeper with
// its code and located errors, an unreachable keeper with its URL, or the
// error itself.
func (a *app) reportError(err error) {
	w := a.env.Stderr
	var p *client.Problem
	var ue *url.Error
	var ce *client.CertificateError
	switch {
	case errors.As(err, &ce):
		fmt.Fprintf(w, "error: %v\n", ce)
		fmt.Fprintf(w, "hint: trust the keeper's CA with --ca-file <keeper data dir>/tls/ca.crt (or %s), or pin it with --ca-fingerprint sha256:… (or %s) after comparing it with the fingerprint the keeper logged\n", EnvCA, EnvCAFingerprint)
	case errors.As(err, &p):
		detail := p.Detail
		if detail == "" {
			detail = p.Title
		}
		fmt.Fprintf(w, "error: %s: %s\n", p.Code, detail)
		for _, e := range p.Errors {
			fmt.Fprintf(w, "  at %s: %s\n", e.Location, e.Message)
		}
		switch p.Code {
		case "auth.missing_token":
			fmt.Fprintf(w, "hint: pass --token or set %s; a new keeper writes its first admin token to <data-dir>/admin.token\n", EnvToken)
		case "auth.invalid_token":
			if a.tokenSource != "" {
				fmt.Fprintf(w, "hint: the token came from %s\n", a.tokenSource)
			}
		}
	case errors.Is(err, context.Canceled):
		fmt.Fprintln(w, "error: interrupted")
	case errors.As(err, &ue):
		fmt.Fprintf(w, "error: cannot reach the keeper at %s: %v\n", a.resolvedURL, ue.Err)
		fmt.Fprintf(w, "hint: is the keeper running? point soulctl at it with --keeper or %s\n", EnvKeeper)
	default:
		fmt.Fprintf(w, "error: %v\n", err)
	}
}

// usageError is a mistake in how soulctl was called; it exits with
// ExitUsage.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usageErrorf(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// exitError ends soulctl with code once the command has reported what it
// had to; msg, when not empty, is printed to stderr as "error: msg".
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string {
	if e.msg == "" {
		return fmt.Sprintf("exit code %d", e.code)
	}
	return e.msg
}

// group returns a command that only holds subcommands.
func group(use, short string, subs ...*cobra.Command) *cobra.Command {
	cmd := &cobra.Command{Use: use, Short: short}
	asGroup(cmd)
	cmd.AddCommand(subs...)
	return cmd
}

// asGroup makes cmd a holder of subcommands: alone it prints its help, and
// an unknown subcommand is a usage error with suggestions.
func asGroup(cmd *cobra.Command) {
	cmd.Args = cobra.ArbitraryArgs
	cmd.SuggestionsMinimumDistance = 2
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return cmd.Help()
		}
		msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
		if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
			// The closest first (cobra lists them in command order).
			slices.SortStableFunc(s, func(x, y string) int { return editDistance(args[0], x) - editDistance(args[0], y) })
			msg += "; did you mean " + strings.Join(s, " or ") + "?"
		}
		return usageErrorf("%s", msg)
	}
}

// editDistance is the Levenshtein distance between a and b, ignoring
// ASCII case.
func editDistance(a, b string) int {
	a, b = strings.ToLower(a), strings.ToLower(b)
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// exactArgs accepts exactly the named positional arguments.
func exactArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) == len(names) {
			return nil
		}
		if len(args) < len(names) {
			return fmt.Errorf("%s needs %s", cmd.CommandPath(), strings.Join(names[len(args):], " "))
		}
		return fmt.Errorf("%s takes %d argument(s) (%s), got %d", cmd.CommandPath(), len(names), strings.Join(names, " "), len(args))
	}
}

func firstNonEmpty(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}
