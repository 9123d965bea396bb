package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/spf13/cobra"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/atomicfile"
)

// EnvConfig overrides where soulctl keeps its contexts; EnvContext picks
// one for a command, as --context does.
const (
	EnvConfig  = "SOULSTACK_CONFIG"
	EnvContext = "SOULSTACK_CONTEXT"
)

// soulctlConfig is ${XDG_CONFIG_HOME:-~/.config}/soulstack/config.yaml:
// named contexts, each a keeper soulctl talks to and how it trusts it and
// finds its token, and the one in use.
type soulctlConfig struct {
	Current  string          `yaml:"current,omitempty" json:"current,omitempty"`
	Contexts []keeperContext `yaml:"contexts" json:"contexts"`
}

// keeperContext is one keeper: its URL, the CA to trust or pin (https),
// and a file with the token to send (else soulctl login's for that URL).
type keeperContext struct {
	Name          string `yaml:"name" json:"name"`
	Keeper        string `yaml:"keeper" json:"keeper"`
	CAFile        string `yaml:"ca_file,omitempty" json:"ca_file,omitempty"`
	CAFingerprint string `yaml:"ca_fingerprint,omitempty" json:"ca_fingerprint,omitempty"`
	TokenFile     string `yaml:"token_file,omitempty" json:"token_file,omitempty"`
}

func (c *soulctlConfig) find(name string) (*keeperContext, bool) {
	i := slices.IndexFunc(c.Contexts, func(k keeperContext) bool { return k.Name == name })
	if i < 0 {
		return nil, false
	}
	return &c.Contexts[i], true
}

// configPath is where soulctl keeps its contexts: $SOULSTACK_CONFIG, else
// ${XDG_CONFIG_HOME:-~/.config}/soulstack/config.yaml.
func (a *app) configPath() (string, error) {
	return a.configFile(EnvConfig, "config.yaml", "soulctl keeps its contexts")
}

func (a *app) readConfig() (soulctlConfig, string, error) {
	var c soulctlConfig
	path, err := a.configPath()
	if err != nil {
		return c, "", err
	}
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return c, path, nil
	case err != nil:
		return c, path, fmt.Errorf("read %s: %w", path, err)
	}
	if err := yaml.UnmarshalWithOptions(b, &c, yaml.Strict()); err != nil {
		return c, path, fmt.Errorf("read %s: %w", path, err)
	}
	return c, path, nil
}

func writeConfig(c soulctlConfig, path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	b, err := yaml.Marshal(c)
	if err != nil {
		return err
	}
	return atomicfile.Write(path, b, 0o600)
}

// keeperContext is the context a command uses: --context, else
// SOULSTACK_CONTEXT, else the current one; nil when none is set. A named
// context that does not exist is a usage error.
func (a *app) keeperContext() (*keeperContext, error) {
	name, source := a.contextName, "--context"
	if name == "" {
		name, source = a.env.Getenv(EnvContext), EnvContext
	}
	if name == "" && a.env.Getenv(EnvConfig) == "" && a.env.Getenv("XDG_CONFIG_HOME") == "" && a.env.Getenv("HOME") == "" {
		return nil, nil // nowhere to keep contexts, none asked for
	}
	c, _, err := a.readConfig()
	if err != nil {
		return nil, err
	}
	if name == "" {
		name, source = c.Current, "the current context"
		if name == "" {
			return nil, nil
		}
	}
	k, ok := c.find(name)
	if !ok {
		return nil, usageErrorf("context %q (%s) does not exist: soulctl context list shows them", name, source)
	}
	return k, nil
}

// contextCommand is soulctl context: add, use, list and delete.
func (a *app) contextCommand() *cobra.Command {
	cmd := group("context", "Remember keepers under names and switch between them", a.contextAdd(), a.contextUse(), a.contextList(), a.contextDelete())
	cmd.Long = `Named contexts, kept in ${XDG_CONFIG_HOME:-~/.config}/soulstack/config.yaml
(mode 0600; ` + EnvConfig + ` overrides): each a keeper's URL, how to trust it and
where its token is. A command uses --context NAME, else ` + EnvContext + `, else
the current context (soulctl context use). --keeper, --token, --ca-file and
--ca-fingerprint, and their environment variables, still win over a context's.`
	return cmd
}

// contextAdd is soulctl context add.
func (a *app) contextAdd() *cobra.Command {
	var k keeperContext
	add := &cobra.Command{
		Use:   "add NAME --keeper URL",
		Short: "Remember a keeper under a name (and use it, if it is the first)",
		Long: `Remembers a keeper: its URL, the CA to trust (--ca-file) or pin
(--ca-fingerprint) for https, and a file with the token to send
(--token-file; else soulctl login's token for that URL). Adding a name that
exists replaces it. The first context added becomes the current one.`,
		Example: `  soulctl context add prod --keeper https://keeper.example.com:8420 --ca-fingerprint sha256:…
  soulctl context add lab --keeper http://127.0.0.1:8420 --token-file ~/lab/.keeper/admin.token`,
		Args: exactArgs("NAME"),
		RunE: a.action(func(cmd *cobra.Command, args []string, p *printer) error {
			k.Name = args[0]
			if err := checkContext(k); err != nil {
				return err
			}
			c, path, err := a.readConfig()
			if err != nil {
				return err
			}
			if old, ok := c.find(k.Name); ok {
				*old = k
			} else {
				c.Contexts = append(c.Contexts, k)
			}
			if c.Current == "" {
				c.Current = k.Name
			}
			if err := writeConfig(c, path); err != nil {
				return err
			}
			return p.print(k, text(fmt.Sprintf("Context %q: %s%s.\n", k.Name, k.Keeper, map[bool]string{true: " (in use)"}[c.Current == k.Name])))
		}),
	}
	fs := add.Flags()
	fs.StringVar(&k.Keeper, "keeper", "", "the keeper's URL (required)")
	fs.StringVar(&k.CAFile, "ca-file", "", "PEM file of the CA to trust for an https:// keeper")
	fs.StringVar(&k.CAFingerprint, "ca-fingerprint", "", "pin the keeper's CA by its SHA-256 fingerprint, sha256:…")
	fs.StringVar(&k.TokenFile, "token-file", "", "a file holding the API token to send (else soulctl login's for this keeper)")
	_ = add.MarkFlagRequired("keeper")
	return add
}

// contextUse is soulctl context use.
func (a *app) contextUse() *cobra.Command {
	use := &cobra.Command{
		Use:     "use NAME",
		Short:   "Talk to this context's keeper from now on",
		Example: `  soulctl context use prod`,
		Args:    exactArgs("NAME"),
		RunE: a.action(func(cmd *cobra.Command, args []string, p *printer) error {
			c, path, err := a.readConfig()
			if err != nil {
				return err
			}
			k, ok := c.find(args[0])
			if !ok {
				return &exitError{code: ExitNotFound, msg: fmt.Sprintf("context %q does not exist: soulctl context list shows them", args[0])}
			}
			c.Current = k.Name
			if err := writeConfig(c, path); err != nil {
				return err
			}
			return p.print(k, text(fmt.Sprintf("Using context %q: %s.\n", k.Name, k.Keeper)))
		}),
	}
	return use
}

// contextList is soulctl context list.
func (a *app) contextList() *cobra.Command {
	list := &cobra.Command{
		Use:   "list",
		Short: "List the contexts; * marks the current one",
		Example: `  soulctl context list
  soulctl context list -o json`,
		Args: cobra.NoArgs,
		RunE: a.action(func(cmd *cobra.Command, _ []string, p *printer) error {
			c, _, err := a.readConfig()
			if err != nil {
				return err
			}
			t := &table{header: []string{"CURRENT", "NAME", "KEEPER", "TRUST", "TOKEN"}}
			for _, k := range c.Contexts {
				trust := firstNonEmpty(k.CAFingerprint, k.CAFile, "-")
				t.add(map[bool]string{true: "*"}[k.Name == c.Current], k.Name, k.Keeper, trust, firstNonEmpty(k.TokenFile, "soulctl login"))
			}
			if c.Contexts == nil {
				c.Contexts = []keeperContext{}
			}
			return p.print(c, t)
		}),
	}
	return list
}

// contextDelete is soulctl context delete.
func (a *app) contextDelete() *cobra.Command {
	del := &cobra.Command{
		Use:     "delete NAME",
		Short:   "Forget a context (the token files and soulctl login's tokens stay)",
		Example: `  soulctl context delete lab`,
		Args:    exactArgs("NAME"),
		RunE: a.action(func(cmd *cobra.Command, args []string, p *printer) error {
			c, path, err := a.readConfig()
			if err != nil {
				return err
			}
			if _, ok := c.find(args[0]); !ok {
				return &exitError{code: ExitNotFound, msg: fmt.Sprintf("context %q does not exist", args[0])}
			}
			c.Contexts = slices.DeleteFunc(c.Contexts, func(k keeperContext) bool { return k.Name == args[0] })
			if c.Current == args[0] {
				c.Current = ""
			}
			if err := writeConfig(c, path); err != nil {
				return err
			}
			return p.print(nil, text(fmt.Sprintf("Context %q forgotten.\n", args[0])))
		}),
	}
	return del
}

// checkContext refuses a context soulctl could not use.
func checkContext(k keeperContext) error {
	if strings.TrimSpace(k.Name) == "" || strings.ContainsAny(k.Name, " \t\n/") {
		return usageErrorf("context name %q: want a word without spaces or slashes", k.Name)
	}
	if _, err := client.NewWithOptions(k.Keeper, "", client.Options{}); err != nil {
		return usageErrorf("--keeper: %v", err)
	}
	if k.CAFingerprint != "" {
		if _, err := client.ParseFingerprint(k.CAFingerprint); err != nil {
			return usageErrorf("--ca-fingerprint: %v", err)
		}
	}
	if k.TokenFile != "" && !filepath.IsAbs(k.TokenFile) {
		return usageErrorf("--token-file: %q: give an absolute path (a context is used from any directory)", k.TokenFile)
	}
	return nil
}
