// Package config is keeper.yml: Load decodes it strictly (an unknown key is
// an error with its line), WithDefaults returns a completed copy, and
// Validate names the first bad field without changing anything.
package config

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"text/template"
	"time"

	"github.com/goccy/go-yaml"
)

// Defaults.
const (
	DefaultListen  = "127.0.0.1:8420"
	DefaultDataDir = "./.keeper"
)

// Config is the keeper's configuration.
type Config struct {
	// Listen is the Operator API's address.
	Listen string `yaml:"listen"`
	// DataDir holds the SQLite database, admin.token and later the keeper's
	// keys and plugins.
	DataDir string `yaml:"data_dir"`
	// DatabaseURL selects PostgreSQL (postgres://…); empty means the
	// embedded SQLite file <data_dir>/keeper.db.
	DatabaseURL string `yaml:"database_url"`
	// DataKeyRef names the base64 key that seals secrets at rest (env: or
	// file:); empty means <data_dir>/data.key, created on first start.
	// Keepers sharing one PostgreSQL must share the key.
	DataKeyRef string `yaml:"data_key_ref"`
	Log        Log    `yaml:"log"`
	// KeeperURL is the address new VMs use to reach the keeper, written
	// into generated userdata; empty means http://<listen>.
	KeeperURL string `yaml:"keeper_url"`
	// CloudInit is the text/template of generated userdata
	// (generate_userdata, self_onboard); empty means a built-in one that
	// authorizes the keeper's key and writes /etc/soulstack/bootstrap.json.
	// It sees .SID, .Hostname, .Index, .Token, .AuthorizedKey, .KeeperURL.
	CloudInit string `yaml:"cloud_init"`
	// BootstrapTokenTTL is how long a bootstrap token lives after its VM
	// is reported created (a Go duration; default 1h).
	BootstrapTokenTTL string `yaml:"bootstrap_token_ttl"`
	// PluginDir is searched for soul-cloud-<driver> before $PATH; empty
	// means <data_dir>/plugins.
	PluginDir string `yaml:"plugin_dir"`
	// Vault resolves vault:<path>#<field> credentials references.
	Vault Vault `yaml:"vault"`

	// AuditKeyRef names the base64 root (32 bytes) of the audit key (env:,
	// file: or vault:), resolved at start; empty means the audit key is
	// derived from the data key. Keepers sharing one PostgreSQL must share it.
	AuditKeyRef string `yaml:"audit_key_ref"`
	// AuditCheckpointDir is where the keeper writes its signed audit
	// checkpoint, outside the database; empty means <data_dir>/audit.
	AuditCheckpointDir string `yaml:"audit_checkpoint_dir"`
	// AuditCheckpointEvery is how many audit events the keeper appends
	// between two checkpoints (it also writes one at start and on
	// shutdown); 0 means 100.
	AuditCheckpointEvery int `yaml:"audit_checkpoint_every"`
}

// Vault is a Vault or OpenBao server.
type Vault struct {
	Address  string `yaml:"address"`
	TokenRef string `yaml:"token_ref"` // env:NAME or file:/path
}

// Log configures the keeper's log on stderr.
type Log struct {
	Level  string `yaml:"level"`  // debug, info, warn, error
	Format string `yaml:"format"` // text or json
}

// Load reads a keeper.yml. Unknown keys are errors.
func Load(path string) (Config, error) {
	var c Config
	b, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("read config: %w", err)
	}
	if err := yaml.UnmarshalWithOptions(b, &c, yaml.Strict(), yaml.DisallowUnknownField()); err != nil {
		return c, fmt.Errorf("config %s:\n%s", path, yaml.FormatError(err, false, true))
	}
	return c, nil
}

// WithDefaults returns a copy of c with every unset field at its default.
func (c Config) WithDefaults() Config {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.DataDir == "" {
		c.DataDir = DefaultDataDir
	}
	if c.Log.Level == "" {
		c.Log.Level = "info"
	}
	if c.Log.Format == "" {
		c.Log.Format = "text"
	}
	if c.KeeperURL == "" {
		c.KeeperURL = "http://" + c.Listen
	}
	if c.BootstrapTokenTTL == "" {
		c.BootstrapTokenTTL = "1h"
	}
	if c.PluginDir == "" {
		c.PluginDir = filepath.Join(c.DataDir, "plugins")
	}
	if c.AuditCheckpointDir == "" {
		c.AuditCheckpointDir = filepath.Join(c.DataDir, "audit")
	}
	if c.AuditCheckpointEvery == 0 {
		c.AuditCheckpointEvery = 100
	}
	return c
}

// Validate reports the first invalid field; it changes nothing.
func (c Config) Validate() error {
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("listen: %q is not host:port: %w", c.Listen, err)
	}
	if strings.TrimSpace(c.DataDir) == "" {
		return errors.New("data_dir: must not be empty")
	}
	if c.DatabaseURL != "" && !strings.HasPrefix(c.DatabaseURL, "postgres://") && !strings.HasPrefix(c.DatabaseURL, "postgresql://") {
		return fmt.Errorf("database_url: want postgres://… (leave it empty for the embedded SQLite)")
	}
	if c.DataKeyRef != "" && !strings.HasPrefix(c.DataKeyRef, "env:") && !strings.HasPrefix(c.DataKeyRef, "file:") {
		return fmt.Errorf("data_key_ref: want env:NAME or file:/path")
	}
	if c.AuditKeyRef != "" && !strings.HasPrefix(c.AuditKeyRef, "env:") && !strings.HasPrefix(c.AuditKeyRef, "file:") && !strings.HasPrefix(c.AuditKeyRef, "vault:") {
		return fmt.Errorf("audit_key_ref: want env:NAME, file:/path or vault:<path>#<field>")
	}
	if c.AuditCheckpointEvery < 0 {
		return fmt.Errorf("audit_checkpoint_every: %d is negative; want a number of events (default 100)", c.AuditCheckpointEvery)
	}
	if d, err := time.ParseDuration(c.BootstrapTokenTTL); err != nil || d <= 0 {
		return fmt.Errorf("bootstrap_token_ttl: %q is not a positive duration such as 1h", c.BootstrapTokenTTL)
	}
	if c.CloudInit != "" {
		if _, err := template.New("cloud_init").Parse(c.CloudInit); err != nil {
			return fmt.Errorf("cloud_init: %w", err)
		}
	}
	if (c.Vault.Address == "") != (c.Vault.TokenRef == "") {
		return errors.New("vault: set both address and token_ref, or neither")
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("log.level: %q is not one of debug, info, warn, error", c.Log.Level)
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		return fmt.Errorf("log.format: %q is not text or json", c.Log.Format)
	}
	return nil
}

// SQLitePath is the embedded database file.
func (c Config) SQLitePath() string { return filepath.Join(c.DataDir, "keeper.db") }

// AdminTokenPath is where the first admin token is written.
func (c Config) AdminTokenPath() string { return filepath.Join(c.DataDir, "admin.token") }
