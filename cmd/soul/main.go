// Command soul is the Soul Stack host agent: `soul join` exchanges the
// one-time bootstrap token for the soul's identity (a client certificate
// from the keeper's CA), `soul run` keeps that identity renewed and serves
// the agent transport, `soul exec --stdio` serves the same executor over
// an SSH session the keeper started, `soul version` prints the version.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/soulstack/soulstack/internal/agent"
	"github.com/soulstack/soulstack/internal/soulid"
	"github.com/soulstack/soulstack/internal/tracing"
	"github.com/soulstack/soulstack/internal/version"
)

func main() {
	// `soul exec --supervise -`: the supervisor of an executor's durable
	// commands, started by the executor (internal/agent).
	agent.SuperviseIfAsked()
	if err := newRoot().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "soul:", err)
		os.Exit(1)
	}
}

func newRoot() *cobra.Command {
	root := &cobra.Command{Use: "soul", Short: "The Soul Stack host agent", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(newJoin(), newRun(), newExec(), newVersion())
	return root
}

func newVersion() *cobra.Command {
	return &cobra.Command{Use: "version", Short: "Print the version", Args: cobra.NoArgs, RunE: func(cmd *cobra.Command, _ []string) error {
		fmt.Fprintln(cmd.OutOrStdout(), "soul", version.String())
		return nil
	}}
}

func newJoin() *cobra.Command {
	var o soulid.JoinOptions
	var bootstrap string
	var flags soulid.Bootstrap
	cmd := &cobra.Command{
		Use:   "join",
		Short: "Join the keeper with the one-time bootstrap token",
		Long: "Reads the bootstrap file (flags override its keys), generates the soul's key, and calls the keeper's POST /v1/join " +
			"over TLS, verifying the keeper against the CA fingerprint. On success the state dir holds soul.key, soul.crt, ca.crt " +
			"and agent.json, and the bootstrap file is removed: its token is spent.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := soulid.ReadBootstrap(bootstrap)
			if err != nil {
				return err
			}
			for _, f := range []struct {
				dst *string
				v   string
			}{{&b.Keeper, flags.Keeper}, {&b.Token, flags.Token}, {&b.SID, flags.SID}, {&b.CAFingerprint, flags.CAFingerprint}} {
				if f.v != "" {
					*f.dst = f.v
				}
			}
			o.Bootstrap = b
			o.BootstrapPath = bootstrap
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			id, err := soulid.Join(ctx, o)
			if err != nil {
				return err
			}
			st := id.State()
			fmt.Fprintf(cmd.OutOrStdout(), "joined as %s; certificate valid until %s; identity in %s\n", st.SID, st.CertNotAfter.Format(time.RFC3339), o.StateDir)
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&bootstrap, "bootstrap", soulid.DefaultBootstrap, "bootstrap file written by cloud-init")
	fs.StringVar(&flags.Keeper, "keeper", "", "the keeper's agent URL (https://host:port); overrides the bootstrap file")
	fs.StringVar(&flags.Token, "token", "", "the one-time bootstrap token; overrides the bootstrap file")
	fs.StringVar(&flags.SID, "sid", "", "this soul's SID; overrides the bootstrap file")
	fs.StringVar(&flags.CAFingerprint, "ca-fingerprint", "", "sha256:<hex> of the keeper CA; overrides the bootstrap file")
	fs.StringVar(&o.StateDir, "state-dir", soulid.DefaultStateDir, "where the identity is kept")
	fs.StringVar(&o.HostKeyDir, "host-key-dir", soulid.DefaultHostKeyDir, "directory of ssh_host_*_key.pub reported to the keeper")
	fs.DurationVar(&o.RetryFor, "retry-for", 0, "keep trying this long while the keeper is unreachable, does not know the token yet or rate-limits (cloud-init passes 3m)")
	return cmd
}

func newRun() *cobra.Command {
	var stateDir, metricsListen string
	var retry time.Duration
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Keep the identity renewed and serve the agent transport",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := slog.New(slog.NewTextHandler(os.Stderr, nil))
			id, err := soulid.Load(stateDir)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			var metrics *agent.Metrics
			if metricsListen != "" {
				metrics = agent.NewMetrics()
				if _, err := serveMetrics(ctx, metricsListen, metrics, log); err != nil {
					return fmt.Errorf("--metrics-listen: %w", err)
				}
			}
			return runAgent(ctx, id, log, retry, metrics)
		},
	}
	cmd.Flags().StringVar(&stateDir, "state-dir", soulid.DefaultStateDir, "where the identity is kept")
	cmd.Flags().DurationVar(&retry, "renew-retry", time.Minute, "pause between failed renewals")
	cmd.Flags().StringVar(&metricsListen, "metrics-listen", "", "serve the agent's Prometheus metrics at host:port/metrics (plain HTTP, no token: bind it to loopback or a monitoring network); off when empty")
	return cmd
}

// runAgent runs the renewal loop and, when a bus transport is linked in,
// its serving loop; it returns when ctx ends or either fails.
func runAgent(ctx context.Context, id *soulid.Identity, log *slog.Logger, retry time.Duration, metrics *agent.Metrics) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st := id.State()
	log.Info("soul agent running", "sid", st.SID, "keeper", st.KeeperURL, "cert_not_after", id.Certificate().NotAfter, "version", version.String())
	// OpenTelemetry's own variable turns the agent's traces on: the
	// keeper's trace of each command continues in the agent's span.
	shutdown, err := tracing.Setup(ctx, tracing.Config{Endpoint: strings.TrimRight(os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT"), "/"),
		Service: "soulstack-soul", Version: version.String(), Instance: st.SID})
	if err != nil {
		return err
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		_ = shutdown(sctx)
	}()
	errc := make(chan error, 2)
	go func() { errc <- id.RenewLoop(ctx, log, retry) }()
	go func() { errc <- serveBus(ctx, id, log, metrics) }()
	n := 2
	var first error
	for range n {
		if err := <-errc; err != nil && first == nil {
			first = err
			cancel()
		} else if first == nil {
			cancel()
		}
	}
	if first != nil && !errors.Is(first, context.Canceled) {
		return first
	}
	return nil
}
