package main

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/soulstack/soulstack/internal/agent"
)

// newExec is `soul exec --stdio`: the executor the keeper starts over an
// SSH session, the same one `soul run` serves over the bus.
func newExec() *cobra.Command {
	var stdio bool
	var spool, shellSpool string
	cmd := &cobra.Command{
		Use:   "exec --stdio",
		Short: "Run the keeper's commands read from standard input (the keeper starts it over SSH)",
		Long: "Serves the keeper's commands over standard input and output in the bus's protocol (framed), as the " +
			"agent does over the bus: the keeper uploads this binary once per host and starts it once per SSH connection. " +
			"Plain commands still running when standard input ends are killed; durable ones run on under the executor's " +
			"supervisor (this binary, `soul exec --supervise -`), their outcomes kept in --spool for the next executor to attach to.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !stdio {
				return errNeedStdio
			}
			// The keeper going away closes standard input; SIGHUP from a
			// cut session must not kill durable commands' waiters.
			signal.Ignore(syscall.SIGHUP, syscall.SIGPIPE)
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return agent.ServeStdio(ctx, os.Stdin, os.Stdout, agent.StdioConfig{Spool: spool, ShellSpool: shellSpool})
		},
	}
	cmd.Flags().BoolVar(&stdio, "stdio", false, "serve over standard input and output")
	cmd.Flags().StringVar(&spool, "spool", "", "where durable commands' results are kept (empty: durable commands run as plain ones)")
	cmd.Flags().StringVar(&shellSpool, "shell-spool", "", "the SSH shell supervisor's spool: commands found there are not started here")
	return cmd
}

var errNeedStdio = errors.New("soul exec serves only over standard input and output: give --stdio")
