// Command keeper is the Soul Stack control-plane daemon: it holds the
// registries and serves the Operator API.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/spf13/cobra"

	"github.com/soulstack/soulstack/internal/api"
	"github.com/soulstack/soulstack/internal/config"
	"github.com/soulstack/soulstack/internal/keeper"
	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/store/sqlstore"
	"github.com/soulstack/soulstack/internal/version"
)

func main() {
	if err := newRoot().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "keeper:", err)
		if _, newer := errors.AsType[*sqlstore.SchemaNewerError](err); newer {
			os.Exit(keeper.ExitSchemaNewer)
		}
		os.Exit(1)
	}
}

// flags are the options every database-using command shares.
type flags struct {
	configPath  string
	listen      string
	dataDir     string
	databaseURL string
	logLevel    string
	insecure    bool
}

func (f *flags) bind(cmd *cobra.Command, withListen bool) {
	fs := cmd.Flags()
	fs.StringVar(&f.configPath, "config", "", "keeper.yml to read (flags override it)")
	if withListen {
		fs.StringVar(&f.listen, "listen", "", "address of the Operator API (default "+config.DefaultListen+")")
		fs.BoolVar(&f.insecure, "insecure-plaintext", false, "serve plain HTTP on a non-loopback --listen address instead of HTTPS (tokens travel in clear)")
	}
	fs.StringVar(&f.dataDir, "data-dir", "", "data directory: SQLite database, admin.token (default "+config.DefaultDataDir+")")
	fs.StringVar(&f.databaseURL, "database-url", "", "PostgreSQL URL postgres://…; empty: embedded SQLite in the data dir (env KEEPER_DATABASE_URL)")
	fs.StringVar(&f.logLevel, "log-level", "", "debug, info, warn or error (default info)")
}

// load builds the configuration: file, then environment, then flags.
func (f *flags) load() (config.Config, error) {
	var c config.Config
	if f.configPath != "" {
		var err error
		if c, err = config.Load(f.configPath); err != nil {
			return c, err
		}
	}
	if v := os.Getenv("KEEPER_DATABASE_URL"); v != "" {
		c.DatabaseURL = v
	}
	for dst, v := range map[*string]string{&c.Listen: f.listen, &c.DataDir: f.dataDir, &c.DatabaseURL: f.databaseURL, &c.Log.Level: f.logLevel} {
		if v != "" {
			*dst = v
		}
	}
	if f.insecure {
		c.InsecurePlaintext = true
	}
	c = c.WithDefaults()
	return c, c.Validate()
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "keeper",
		Short:         "Soul Stack keeper: registries, Operator API, audit log",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newServe(), newMigrate(), newBackup(), newRestore(), newAudit(), newToken(), newVersion())
	return root
}

func newServe() *cobra.Command {
	var f flags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the keeper daemon",
		Long: `Run the keeper daemon. With no options it keeps an embedded SQLite database
under ./.keeper, applies its migrations, creates an admin API token on first
start (written to ./.keeper/admin.token, mode 0600) and serves the Operator API
on http://127.0.0.1:8420. Ctrl-C (SIGINT) or SIGTERM shuts it down gracefully.

On a non-loopback --listen address it serves HTTPS: with tls.cert_file and
tls.key_file from keeper.yml, or else with a server certificate from its own
CA, made on first start in <data-dir>/tls (ca.crt for clients; keys mode
0600) and named by the SHA-256 fingerprint it logs. Plain HTTP there needs
--insecure-plaintext.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.load()
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			level := new(slog.LevelVar)
			_ = level.UnmarshalText([]byte(c.Log.Level))
			log := keeper.NewLoggerLevel(os.Stderr, c, level)
			ready := make(chan net.Addr, 1)
			done := make(chan struct{})
			defer close(done)
			go superviseService(ctx, done, ready, log, func() (config.Config, error) { return f.load() }, c, level)
			return keeper.Run(ctx, c, log, ready)
		},
	}
	f.bind(cmd, true)
	return cmd
}

// superviseService speaks systemd's notify protocol ($NOTIFY_SOCKET, for
// Type=notify units; nothing without it) and reloads the configuration on
// SIGHUP: READY=1 once the keeper accepts requests, RELOADING=1 then
// READY=1 around a reload, STOPPING=1 when it begins to drain. A reload
// applies log.level, the one key that is safe to change while running;
// any other key that changed is named in the log as needing a restart,
// and a configuration that does not load keeps the running one.
func superviseService(ctx context.Context, done <-chan struct{}, ready <-chan net.Addr, log *slog.Logger, load func() (config.Config, error), running config.Config, level *slog.LevelVar) {
	notify := func(state string) {
		if _, err := daemon.SdNotify(false, state); err != nil {
			log.Warn("notify systemd", "state", state, "err", err)
		}
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	select {
	case <-ready:
		notify(daemon.SdNotifyReady)
	case <-ctx.Done():
	case <-done:
		return
	}
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			notify(daemon.SdNotifyStopping)
			<-done
			return
		case <-hup:
			notify(daemon.SdNotifyReloading)
			next, err := load()
			if err != nil {
				log.Error("reload: the configuration does not load; the running one stays", "err", err)
				notify(daemon.SdNotifyReady)
				continue
			}
			if next.Log.Level != running.Log.Level {
				_ = level.UnmarshalText([]byte(next.Log.Level))
				log.Info("reload: log level changed", "from", running.Log.Level, "to", next.Log.Level)
			}
			want := next
			want.Log.Level = running.Log.Level
			if changed := config.Changed(running, want); len(changed) > 0 {
				log.Warn("reload: these keys changed and take effect only after a restart", "keys", strings.Join(changed, ", "))
			}
			running.Log.Level = next.Log.Level
			notify(daemon.SdNotifyReady)
		}
	}
}

func newMigrate() *cobra.Command {
	var f flags
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply database migrations and exit",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.load()
			if err != nil {
				return err
			}
			if err := keeper.Migrate(cmd.Context(), c); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "database is at the latest schema version (registries and run queue)")
			return nil
		},
	}
	f.bind(cmd, false)
	return cmd
}

func newBackup() *cobra.Command {
	var f flags
	var includeKey bool
	cmd := &cobra.Command{
		Use:   "backup FILE",
		Short: "Write a consistent online backup of the keeper to FILE",
		Long: `Write a consistent backup of the keeper's data to FILE (a gzipped tar, mode
0600), while the keeper runs: the SQLite database as one snapshot (VACUUM
INTO), the keeper id, its SSH key and CA (private keys sealed with the data
key), its files, and the audit checkpoints and restore records, copied
before the database so that none is ahead of it. The audit log must verify
first (backup.audit_broken otherwise): a backup never carries a broken log
on. The data key itself is not in the backup unless --include-data-key;
keep it (or data_key_ref's secret) apart, as restore needs it.

With PostgreSQL (database_url) the database is not in FILE: back it up with
pg_dump (docs/operations.md) and keep FILE with the dump.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.load()
			if err != nil {
				return err
			}
			m, err := keeper.Backup(cmd.Context(), c, args[0], keeper.BackupOptions{IncludeDataKey: includeKey})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "backed up keeper %s (%s, schema %d, audit row %d, %d files) to %s\n", m.KeeperID, m.Backend, m.SchemaVersion, m.Audit.Seq, len(m.Files), args[0])
			if !m.DataKey.Included {
				fmt.Fprintf(cmd.OutOrStdout(), "the data key is not in the backup (%s, fingerprint %s): restore needs it\n", m.DataKey.Ref, m.DataKey.Fingerprint)
			}
			return nil
		},
	}
	f.bind(cmd, false)
	cmd.Flags().BoolVar(&includeKey, "include-data-key", false, "put the data key itself in the backup (then the backup alone opens every secret)")
	return cmd
}

func newRestore() *cobra.Command {
	var f flags
	var keyFile string
	cmd := &cobra.Command{
		Use:   "restore FILE",
		Short: "Restore a backup into an empty data dir",
		Long: `Restore the backup in FILE into the data dir (which must be empty, but for a
data.key put there for the restore). Every member is checked against the
backup's manifest, the data key against the backup's fingerprint (data_key_ref,
--data-key FILE, the backup's own with --include-data-key, or <data-dir>/data.key),
and the backup's audit log against its checkpoints and those already in the
checkpoint directory (restore.audit_truncated when they say rows are missing).

The audit history then continues from the backup: a signed restore record
in the checkpoint directory says from which row, and supersedes the
checkpoints written between the backup and the restore (kept in the record
as the evidence of what the restore gave up); a keeper.restored event opens
the continued chain. keeper audit verify passes with no file moved by hand.

With PostgreSQL, restore the database with pg_restore first, then run this
with the keeper's database_url.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.load()
			if err != nil {
				return err
			}
			r, err := keeper.Restore(cmd.Context(), c, args[0], keeper.RestoreOptions{DataKeyFile: keyFile})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "restored keeper %s from its backup of %s into %s; audit history continues from row %d",
				r.Manifest.KeeperID, r.Manifest.CreatedAt.Format(time.RFC3339), c.DataDir, r.Record.FromSeq)
			if n := len(r.Record.Superseded); n > 0 {
				fmt.Fprintf(cmd.OutOrStdout(), " (%d checkpoint(s) written after the backup superseded)", n)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "; record %s\n", r.RecordPath)
			return nil
		},
	}
	f.bind(cmd, false)
	cmd.Flags().StringVar(&keyFile, "data-key", "", "the data key file (base64) when keeper.yml has no data_key_ref and the backup does not include it")
	return cmd
}

func newAudit() *cobra.Command {
	audit := &cobra.Command{Use: "audit", Short: "Work with the audit log directly in the database"}
	var f flags
	var asJSON bool
	verify := &cobra.Command{
		Use:   "verify",
		Short: "Verify the audit chain and checkpoints; exit 1 naming every problem",
		Long: `Verify the audit log directly in the database: every row's HMAC under the
audit key (derived from the data key, or audit_key_ref) and its link to the
row before, the chain head, and the head against every signed checkpoint in
the checkpoint directory (audit_checkpoint_dir, default <data-dir>/audit).
Each problem is printed as "row N: <code>: <message>" with a stable code:
audit.row_tampered, audit.rows_missing, audit.relinked, audit.head_mismatch,
audit.truncated, audit.emptied, audit.unkeyed, audit.checkpoint_mismatch or
audit.checkpoint_invalid; the command then exits 1.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.load()
			if err != nil {
				return err
			}
			r, err := keeper.VerifyAudit(cmd.Context(), c)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				_ = enc.Encode(api.ReportWire(r))
			} else {
				for _, p := range r.Problems {
					fmt.Fprintf(out, "row %d: %s: %s\n", p.Seq, p.Kind, p.Message)
				}
				if r.OK {
					fmt.Fprintf(out, "audit chain OK: %d events, head %d, %d signed checkpoint(s)\n", r.Checked, r.HeadSeq, r.Checkpoints)
				}
				if r.Legacy > 0 {
					fmt.Fprintf(out, "rows 1..%d are legacy rows (plain SHA-256, written before the audit key): the keyed rows after them cover them as they were at the upgrade, but changes made before it cannot be detected\n", r.Legacy)
				}
				if r.Restores > 0 {
					fmt.Fprintf(out, "%d restore record(s): the history continues from a backup; %d checkpoint(s) written between a backup and its restore are superseded\n", r.Restores, r.Superseded)
				}
				if r.Checkpoints == 0 {
					fmt.Fprintf(out, "no signed checkpoint in %s: rows removed from the end of the log cannot be noticed\n", c.AuditCheckpointDir)
				}
			}
			if !r.OK {
				return errors.New("audit chain is broken")
			}
			return nil
		},
	}
	f.bind(verify, false)
	verify.Flags().BoolVarP(&asJSON, "json", "j", false, "print the report as JSON")
	audit.AddCommand(verify)
	return audit
}

func newToken() *cobra.Command {
	token := &cobra.Command{Use: "token", Short: "Work with API tokens directly in the database"}
	var f flags
	var force bool
	bootstrap := &cobra.Command{
		Use:   "bootstrap",
		Short: "Mint an admin API token from this host when no active admin token is left",
		Long: `Mint a new admin API token when the registry has no active (unrevoked,
unexpired) admin token, and write it to <data-dir>/admin.token (mode 0600,
replaced atomically). It opens the database directly, so it needs what the
keeper itself needs on this host: access to the data dir or the database URL.
Whoever has that is trusted already; the audit log records the token as
token.created by the actor "host". It prints the file's path and the token's
id, never the token. A running keeper accepts the new token at once.

While an active admin token exists it refuses and names it: use that token
(soulctl token create NAME --role admin makes more). --force mints one anyway,
for an admin token that is lost but not yet expired; revoke the lost one after.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.load()
			if err != nil {
				return err
			}
			id, path, err := keeper.BootstrapAdminToken(cmd.Context(), c, force)
			if errors.Is(err, keeper.ErrNoTokens) {
				return errors.New("refused: this database has no API token at all, so no keeper has served it yet; keeper serve creates the first admin token itself")
			}
			var se *store.Error
			if errors.As(err, &se) && errors.Is(err, store.ErrActiveAdmin) {
				return fmt.Errorf("refused: admin token %s is still active (not revoked, not expired); use it, or pass --force to mint another anyway", se.Key)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "minted admin API token %s; wrote it to %s (mode 0600)\n", id, path)
			return nil
		},
	}
	f.bind(bootstrap, false)
	bootstrap.Flags().BoolVar(&force, "force", false, "mint an admin token even while an active one exists")
	token.AddCommand(bootstrap)
	return token
}

func newVersion() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the keeper's version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), "keeper", version.String())
		},
	}
}
