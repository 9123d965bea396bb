// Package config is keeper.yml: Load decodes it strictly (an unknown key is
// an error with its line), WithDefaults returns a completed copy, and
// Validate names the first bad field without changing anything.
package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
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
	// AdvertiseURL is the https URL VMs reach the agent listener at
	// (agent_listen), baked into their userdata with the keeper CA's
	// fingerprint. Empty: a local provider's VMs get
	// https://soulstack-local-gateway:<agent port> (the bridge's address,
	// in each local VM's /etc/hosts); other providers' get keeper_url's
	// host with the agent port, which real clouds rarely reach: set it.
	AdvertiseURL string `yaml:"advertise_url"`
	// AgentListen is the agent listener's address: HTTPS with the
	// keeper's own CA, serving only the join routes and the soul binary.
	// Empty: listen's host on the listen port + 1 (port 0, a free one,
	// when listen's port is 0): a loopback keeper's listener is on
	// loopback, which local and QEMU VMs reach at their gateway (the local
	// driver sends it there); set it (0.0.0.0:8421) for VMs elsewhere.
	// "off" disables it (and self-onboarding).
	AgentListen string `yaml:"agent_listen"`
	// AgentBinary is the soul binary the agent listener serves to new
	// VMs. Empty: "soul" next to the keeper's executable, else in the
	// plugin dir; without one, userdata only leaves the bootstrap file.
	AgentBinary string `yaml:"agent_binary"`
	// AgentCertValidity is the lifetime of the client certificates souls
	// get at join and renewal (a Go duration; default 24h). The agent
	// renews after two thirds of it; a destroyed soul's certificate is
	// refused at once, and lapses by then wherever the refusal has not
	// reached.
	AgentCertValidity Duration `yaml:"agent_cert_validity"`
	// CloudInit is the text/template of generated userdata
	// (generate_userdata, self_onboard); empty means a built-in one that
	// authorizes the keeper's key and writes /etc/soulstack/bootstrap.json.
	// It sees .SID, .Hostname, .Index, .Token, .AuthorizedKey, .KeeperURL
	// (the advertised agent URL), .CAFingerprint, .CAPEMBase64, .AgentURL
	// .AgentSHA256 (empty without an agent binary), .StateDir and .HostKeyDir.
	CloudInit string `yaml:"cloud_init"`
	// BootstrapTokenTTL is how long a bootstrap token lives after its VM
	// is reported created (a Go duration; default 1h).
	BootstrapTokenTTL Duration `yaml:"bootstrap_token_ttl"`
	// DrainTimeout is how long a stopping keeper (SIGTERM, SIGINT) lets
	// the steps in flight finish before it cancels them (a Go duration;
	// default 60s). Their runs are handed back and resume on the next
	// keeper to start either way.
	DrainTimeout Duration `yaml:"drain_timeout"`
	// PluginDir is where the keeper finds soul-cloud-<driver>; empty
	// means <data_dir>/plugins.
	PluginDir string `yaml:"plugin_dir"`
	// PluginPathLookup lets the keeper also look for soul-cloud-<driver> on
	// $PATH when the plugin dir has none (the same ownership checks apply).
	// Off by default: only the plugin dir is searched.
	PluginPathLookup bool `yaml:"plugin_path_lookup"`
	// Vault resolves vault:<path>#<field> credentials references.
	Vault Vault `yaml:"vault"`
	// Credentials says which file: and env: references providers and
	// souls may resolve (none by default).
	Credentials Credentials `yaml:"credentials"`
	// Drivers holds what a keeper admin allows each driver's providers,
	// by driver name (the endpoints they may call).
	Drivers map[string]Driver `yaml:"drivers"`
	// TLS configures HTTPS on the Operator API listener.
	TLS TLS `yaml:"tls"`
	// InsecurePlaintext serves plain HTTP on a non-loopback listen address
	// (the flag --insecure-plaintext). Without it such an address gets
	// HTTPS: the given certificate or the keeper's own CA.
	InsecurePlaintext bool `yaml:"insecure_plaintext"`
	// MetricsListen, when set, serves /metrics without a token on this
	// host:port as well (plain HTTP); the API listener's /metrics always
	// needs a token with metrics.read.
	MetricsListen string `yaml:"metrics_listen"`
	// Tracing exports OpenTelemetry traces over OTLP/HTTP; off without
	// an endpoint.
	Tracing Tracing `yaml:"tracing"`
	// OIDC signs people in with an OpenID Connect provider; off without
	// an issuer.
	OIDC OIDC `yaml:"oidc"`
	// Approvals are the approval policies: steps they hold wait for a
	// second person (docs/approvals.md).
	Approvals Approvals `yaml:"approvals"`
	// HTTP bounds what one client can hold of the API listener.
	HTTP HTTP `yaml:"http"`
	// NATS is the agent transport's message bus (docs/agent.md).
	NATS NATS `yaml:"nats"`
	// SSH configures the connections kept to souls across runs.
	SSH SSH `yaml:"ssh"`
	// Runs configures how keepers hold the runs they execute.
	Runs Runs `yaml:"runs"`

	// Drift schedules the drift sweep: every soul's active seeds checked
	// (check runs) every Every, each sweep starting up to Jitter of Every
	// late. Every 0 (the default) schedules none; soulctl drift check and
	// POST /v1/drift/checks check on demand.
	Drift Drift `yaml:"drift"`

	// Notifications are outgoing webhooks: each event named is POSTed to
	// url as JSON, signed with HMAC-SHA256 under the secret secret_ref
	// names, from a durable queue with retries.
	Notifications []Notification `yaml:"notifications"`

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
	// MCP configures the Model Context Protocol server at /mcp.
	MCP MCP `yaml:"mcp"`
}

// Notification is one outgoing webhook.
type Notification struct {
	// Name names it in the delivery log (default: its URL's host).
	Name string `yaml:"name"`
	URL  string `yaml:"url"`
	// Events are the events it receives: soul.drifted, soul.in_sync,
	// run.failed, run.succeeded, cloud.provisioned.
	Events []string `yaml:"events"`
	// SecretRef names the signing secret (env:, file:, vault:).
	SecretRef string `yaml:"secret_ref"`
}

// NotificationEvents are the events a notification may name.
var NotificationEvents = []string{"soul.drifted", "soul.in_sync", "run.failed", "run.succeeded", "cloud.provisioned"}

// Drift is keeper.yml's drift schedule.
type Drift struct {
	Every Duration `yaml:"every"`
	// Jitter is a percentage of Every, such as "10%" (default).
	Jitter string `yaml:"jitter"`
}

// JitterFraction is Jitter as a fraction of Every (0.1 for "10%").
func (d Drift) JitterFraction() (float64, error) {
	if d.Jitter == "" {
		return 0.1, nil
	}
	n, ok := strings.CutSuffix(strings.TrimSpace(d.Jitter), "%")
	f, err := strconv.ParseFloat(n, 64)
	if !ok || err != nil || f < 0 || f > 100 {
		return 0, fmt.Errorf("drift.jitter: %q is not a percentage from 0%% to 100%% such as 10%%", d.Jitter)
	}
	return f / 100, nil
}

// Runs is the lease a keeper holds on the runs it executes: one heartbeat
// row per keeper. Every keeper sharing one database must use the same
// timings: a keeper that thinks a lease stale sooner than its holder
// renews it would take the runs over while they still execute.
type Runs struct {
	// Heartbeat is how often the keeper's heartbeat row is renewed
	// (default 1s).
	Heartbeat Duration `yaml:"heartbeat"`
	// StaleAfter is how long a keeper's row lasts without renewal before
	// another keeper takes its runs over and resumes them, reattaching
	// their commands (default 3s; at least three heartbeats). The holder
	// stops executing one heartbeat before.
	StaleAfter Duration `yaml:"stale_after"`
	// Workers is how many runs the keeper executes at once (default 20);
	// more wait in the queue. Runs that mostly wait on their souls cost
	// little each: one goroutine and a command in flight.
	Workers int `yaml:"workers"`
	// MaxTargetOutputBytes is the bytes of JSON a run keeps of one soul
	// target's output (default 1 MiB); MaxOutputBytes the bytes it keeps
	// of all its soul targets' outputs together (default 64 MiB), past
	// which each further target keeps 4 KiB. A cut output keeps its shape:
	// its longest strings end with "…[truncated: N bytes dropped]".
	MaxTargetOutputBytes int `yaml:"max_target_output_bytes"`
	MaxOutputBytes       int `yaml:"max_output_bytes"`
}

// MCP configures /mcp. Reads follow the token's permissions, as REST does.
type MCP struct {
	// AllowWrites enables the tools that change state (run_start,
	// run_cancel) for tokens that hold their permission. Off by default:
	// a model can read and validate, not act.
	AllowWrites bool `yaml:"allow_writes"`
}

// TLS is the API listener's certificate. With cert_file and key_file the
// keeper serves HTTPS with them on any address; without them, a
// non-loopback address gets a server certificate from the keeper's own CA
// under <data_dir>/tls, unless auto_ca is false.
type TLS struct {
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// AutoCA: make and use the keeper's own CA off loopback (default true).
	AutoCA *bool `yaml:"auto_ca"`
	// Hosts are extra DNS names or IP addresses the self-made server
	// certificate covers, besides the listen address, keeper_url's host,
	// localhost, 127.0.0.1 and ::1.
	Hosts []string `yaml:"hosts"`
}

// HTTP holds the API listener's timeouts and per-client limits. Durations
// are Go durations (10s, 2m).
type HTTP struct {
	// ReadHeaderTimeout bounds reading a request's headers (default 10s).
	ReadHeaderTimeout Duration `yaml:"read_header_timeout"`
	// ReadTimeout bounds reading a whole request, body included (default
	// 60s). Event streams lift it once their request is read.
	ReadTimeout Duration `yaml:"read_timeout"`
	// IdleTimeout closes a kept-alive connection with no request (default
	// 120s).
	IdleTimeout Duration `yaml:"idle_timeout"`
	// MaxConnsPerClient caps the open connections of one client address
	// (default 64); a connection over the cap is closed at once.
	MaxConnsPerClient int `yaml:"max_conns_per_client"`
	// AuthFailureBurst is how many failed authentications one client
	// address may make in a row (default 10) before it is answered 429
	// auth.rate_limited; AuthFailureInterval gives one attempt back per
	// interval (default 1s).
	AuthFailureBurst    int      `yaml:"auth_failure_burst"`
	AuthFailureInterval Duration `yaml:"auth_failure_interval"`
}

// Vault is a Vault or OpenBao server.
type Vault struct {
	Address  string `yaml:"address"`
	TokenRef string `yaml:"token_ref"` // env:NAME or file:/path
	// ProjectPrefix is the path every vault: reference of a project's
	// provider or soul must lie under, {project} standing for the
	// project's name (secret/data/soulstack/{project}/): a project's token
	// may write such references, and with a prefix set the keeper resolves
	// no vault: reference of a provider or soul outside its project's.
	// Empty: only keeper admins may write vault: references.
	ProjectPrefix string `yaml:"project_prefix"`
}

// Tracing is keeper.yml's tracing section: one trace per run, from the
// API request through the queue, the engine, each step and target, to
// the transport.
type Tracing struct {
	// OTLPEndpoint is the collector's OTLP/HTTP base URL, such as
	// http://127.0.0.1:4318 (spans go to <url>/v1/traces); empty: off.
	OTLPEndpoint string `yaml:"otlp_endpoint"`
	// SampleRatio is the share of traces kept, from 0 (exclusive) to 1
	// (the default).
	SampleRatio float64 `yaml:"sample_ratio"`
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
	if c.TLS.AutoCA == nil {
		on := true
		c.TLS.AutoCA = &on
	}
	if c.KeeperURL == "" {
		scheme := "http://"
		if c.ServesTLS() {
			scheme = "https://"
		}
		c.KeeperURL = scheme + c.Listen
	}
	h := &c.HTTP
	orDefault(&h.ReadHeaderTimeout, 10*time.Second)
	orDefault(&h.ReadTimeout, 60*time.Second)
	orDefault(&h.IdleTimeout, 120*time.Second)
	orDefault(&h.AuthFailureInterval, time.Second)
	if h.MaxConnsPerClient == 0 {
		h.MaxConnsPerClient = 64
	}
	if h.AuthFailureBurst == 0 {
		h.AuthFailureBurst = 10
	}
	if c.AgentListen == "" {
		host, port := "127.0.0.1", "0"
		if h, p, err := net.SplitHostPort(c.Listen); err == nil {
			host = h
			if n, err := strconv.Atoi(p); err == nil && p != "0" && n < 65535 {
				port = strconv.Itoa(n + 1)
			}
		}
		c.AgentListen = net.JoinHostPort(host, port)
	}
	orDefault(&c.AgentCertValidity, 24*time.Hour)
	orDefault(&c.BootstrapTokenTTL, time.Hour)
	orDefault(&c.DrainTimeout, 60*time.Second)
	orDefault(&c.Runs.Heartbeat, time.Second)
	orDefault(&c.Runs.StaleAfter, 3*time.Second)
	if c.PluginDir == "" {
		c.PluginDir = filepath.Join(c.DataDir, "plugins")
	}
	if c.AuditCheckpointDir == "" {
		c.AuditCheckpointDir = filepath.Join(c.DataDir, "audit")
	}
	if c.AuditCheckpointEvery == 0 {
		c.AuditCheckpointEvery = 100
	}
	c.NATS = c.NATS.withDefaults(c.Listen, c.AgentListen)
	c.SSH = c.SSH.withDefaults()
	c.OIDC = c.OIDC.withDefaults()
	orDefault(&c.Approvals.ExpiresIn, 24*time.Hour)
	return c
}

// Validate reports the first invalid field; it changes nothing.
func (c Config) Validate() error {
	for _, check := range []func() error{
		c.validateStorage, c.validateTimings, c.validateAgent, c.validateSecrets,
		func() error { return validateDrivers(c.Drivers) },
		c.validateTLS, c.HTTP.validate, c.NATS.validate, c.SSH.validate,
		c.validateObservability, c.Approvals.validate, c.OIDC.validate,
	} {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// validateStorage checks where the keeper listens and keeps its state:
// listen, data_dir, database_url, the key references, checkpoints.
func (c Config) validateStorage() error {
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
	return nil
}

// validateAgent checks the agent listener, the URL VMs reach it at, and
// the userdata template.
func (c Config) validateAgent() error {
	if c.AgentListen != AgentListenOff {
		if _, _, err := net.SplitHostPort(c.AgentListen); err != nil {
			return fmt.Errorf("agent_listen: %q is not host:port or %q: %w", c.AgentListen, AgentListenOff, err)
		}
	}
	if c.AdvertiseURL != "" {
		u, err := url.Parse(c.AdvertiseURL)
		if err != nil || u.Scheme != "https" || u.Hostname() == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
			return fmt.Errorf("advertise_url: %q is not https://host:port (the agent listener as VMs reach it)", c.AdvertiseURL)
		}
	}
	if c.CloudInit != "" {
		if _, err := template.New("cloud_init").Parse(c.CloudInit); err != nil {
			return fmt.Errorf("cloud_init: %w", err)
		}
	}
	return nil
}

// validateSecrets checks Vault and the credentials allow-lists.
func (c Config) validateSecrets() error {
	if (c.Vault.Address == "") != (c.Vault.TokenRef == "") {
		return errors.New("vault: set both address and token_ref, or neither")
	}
	if p := c.Vault.ProjectPrefix; p != "" && (!strings.Contains(p, "{project}") || !strings.HasSuffix(p, "/") || strings.HasPrefix(p, "/")) {
		return fmt.Errorf("vault.project_prefix: %q must contain {project} and end with / (secret/data/soulstack/{project}/)", p)
	}
	return c.Credentials.validate()
}

// validateObservability checks metrics, tracing and logging.
func (c Config) validateObservability() error {
	if c.MetricsListen != "" {
		if _, _, err := net.SplitHostPort(c.MetricsListen); err != nil {
			return fmt.Errorf("metrics_listen: %q is not host:port: %w", c.MetricsListen, err)
		}
	}
	if u := c.Tracing.OTLPEndpoint; u != "" {
		if pu, err := url.Parse(u); err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" || pu.RawQuery != "" {
			return fmt.Errorf("tracing.otlp_endpoint: %q is not an http:// or https:// URL such as http://127.0.0.1:4318", u)
		}
	}
	if r := c.Tracing.SampleRatio; r < 0 || r > 1 {
		return fmt.Errorf("tracing.sample_ratio: %v is not from 0 to 1", r)
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

// validateTimings checks the top-level durations and the run lease.
func (c Config) validateTimings() error {
	if err := positive("drain_timeout", c.DrainTimeout, 0, "60s"); err != nil {
		return err
	}
	if err := positive("bootstrap_token_ttl", c.BootstrapTokenTTL, 0, "1h"); err != nil {
		return err
	}
	if err := positive("agent_cert_validity", c.AgentCertValidity, Duration(time.Second), "24h"); err != nil {
		return err
	}
	if err := positive("runs.heartbeat", c.Runs.Heartbeat, 0, "1s"); err != nil {
		return err
	}
	if err := positive("runs.stale_after", c.Runs.StaleAfter, 3*c.Runs.Heartbeat, "3s"); err != nil {
		return fmt.Errorf("%w (three runs.heartbeat)", err)
	}
	if c.Runs.Workers < 0 || c.Runs.Workers > 10000 {
		return fmt.Errorf("runs.workers: %d is not between 1 and 10000 (0 means the default, 20)", c.Runs.Workers)
	}
	if c.Drift.Every != 0 && c.Drift.Every.Std() < 10*time.Second {
		return fmt.Errorf("drift.every: %s is under 10s (e.g. 1h; 0 schedules no sweep)", c.Drift.Every.Std())
	}
	if _, err := c.Drift.JitterFraction(); err != nil {
		return err
	}
	names := map[string]bool{}
	for i, n := range c.Notifications {
		where := fmt.Sprintf("notifications[%d]", i)
		u, err := url.Parse(n.URL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return fmt.Errorf("%s.url: %q is not an http(s) URL", where, n.URL)
		}
		if n.SecretRef == "" {
			return fmt.Errorf("%s.secret_ref: required (the deliveries are signed; e.g. env:SOULSTACK_WEBHOOK_SECRET)", where)
		}
		if len(n.Events) == 0 {
			return fmt.Errorf("%s.events: name at least one of %s", where, strings.Join(NotificationEvents, ", "))
		}
		for _, e := range n.Events {
			if !slices.Contains(NotificationEvents, e) {
				return fmt.Errorf("%s.events: %q is not one of %s", where, e, strings.Join(NotificationEvents, ", "))
			}
		}
		name := n.Name
		if name == "" {
			name = u.Host
		}
		if names[name] {
			return fmt.Errorf("%s.name: %q is used twice (give each a name)", where, name)
		}
		names[name] = true
	}
	if c.Runs.MaxTargetOutputBytes < 0 || c.Runs.MaxTargetOutputBytes > 0 && c.Runs.MaxTargetOutputBytes < 4096 {
		return fmt.Errorf("runs.max_target_output_bytes: %d is under 4096 bytes (default 1048576)", c.Runs.MaxTargetOutputBytes)
	}
	if c.Runs.MaxOutputBytes < 0 || c.Runs.MaxOutputBytes > 0 && c.Runs.MaxOutputBytes < max(c.Runs.MaxTargetOutputBytes, 4096) {
		return fmt.Errorf("runs.max_output_bytes: %d is under runs.max_target_output_bytes (default 67108864)", c.Runs.MaxOutputBytes)
	}
	return nil
}

// AgentListenOff disables the agent listener.
const AgentListenOff = "off"

// SQLitePath is the embedded database file.
func (c Config) SQLitePath() string { return filepath.Join(c.DataDir, "keeper.db") }

// AdminTokenPath is where the first admin token is written.
func (c Config) AdminTokenPath() string { return filepath.Join(c.DataDir, "admin.token") }

// TLSDir holds the keeper's own CA and its server certificate.
func (c Config) TLSDir() string { return filepath.Join(c.DataDir, "tls") }

// LoopbackListen reports whether the API listens on a loopback address
// only (localhost, 127.0.0.0/8, ::1).
func (c Config) LoopbackListen() bool { return IsLoopback(c.Listen) }

// IsLoopback reports whether host:port names a loopback host. An empty or
// unspecified host (all interfaces) and names other than localhost are
// not loopback.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ServesTLS reports whether the API listener speaks HTTPS: with the given
// certificate files, or with the keeper's own CA off loopback.
func (c Config) ServesTLS() bool {
	if c.TLS.CertFile != "" {
		return true
	}
	return !c.LoopbackListen() && !c.InsecurePlaintext && (c.TLS.AutoCA == nil || *c.TLS.AutoCA)
}

func (c Config) validateTLS() error {
	if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
		return errors.New("tls: set both cert_file and key_file, or neither")
	}
	if c.TLS.CertFile != "" && c.InsecurePlaintext {
		return errors.New("insecure_plaintext: contradicts tls.cert_file; drop one of them")
	}
	if !c.LoopbackListen() && !c.ServesTLS() && !c.InsecurePlaintext {
		return fmt.Errorf("listen: %s is not a loopback address and tls.auto_ca is false without tls.cert_file/key_file: "+
			"API tokens would travel in clear; set tls.cert_file and tls.key_file, leave tls.auto_ca on for the keeper's own CA, "+
			"or pass --insecure-plaintext (insecure_plaintext: true) to serve plain HTTP anyway", c.Listen)
	}
	return nil
}

func (h HTTP) validate() error {
	for _, d := range []struct {
		name string
		v    Duration
	}{
		{"http.read_header_timeout", h.ReadHeaderTimeout},
		{"http.read_timeout", h.ReadTimeout},
		{"http.idle_timeout", h.IdleTimeout},
		{"http.auth_failure_interval", h.AuthFailureInterval},
	} {
		if err := positive(d.name, d.v, 0, "30s"); err != nil {
			return err
		}
	}
	if h.MaxConnsPerClient < 1 {
		return fmt.Errorf("http.max_conns_per_client: %d must be at least 1", h.MaxConnsPerClient)
	}
	if h.AuthFailureBurst < 1 {
		return fmt.Errorf("http.auth_failure_burst: %d must be at least 1", h.AuthFailureBurst)
	}
	return nil
}

// Changed names the keys (dotted yaml paths, such as log.format) whose
// values differ between a and b.
func Changed(a, b Config) []string {
	var out []string
	changed(reflect.ValueOf(a), reflect.ValueOf(b), "", &out)
	return out
}

func changed(a, b reflect.Value, prefix string, out *[]string) {
	t := a.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		av, bv := a.Field(i), b.Field(i)
		if f.Type.Kind() == reflect.Struct && f.Type.NumField() > 0 && !reflect.DeepEqual(av.Interface(), bv.Interface()) {
			before := len(*out)
			changed(av, bv, prefix+name+".", out)
			if len(*out) == before {
				*out = append(*out, prefix+name)
			}
			continue
		}
		if !reflect.DeepEqual(av.Interface(), bv.Interface()) {
			*out = append(*out, prefix+name)
		}
	}
}
