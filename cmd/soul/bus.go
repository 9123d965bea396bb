package main

import (
	"context"
	"log/slog"
	"path/filepath"

	"github.com/soulstack/soulstack/internal/agent"
	"github.com/soulstack/soulstack/internal/soulid"
	"github.com/soulstack/soulstack/internal/version"
)

// serveBus serves the agent transport over the keeper's NATS bus, at the
// URLs its join answer gave, with the identity it keeps renewed, until ctx
// ends.
func serveBus(ctx context.Context, id *soulid.Identity, log *slog.Logger, metrics *agent.Metrics) error {
	st := id.State()
	if len(st.NATSURLs) == 0 {
		log.Warn("the keeper gave no agent bus URLs at join: only renewing the identity; steps reach this soul over SSH")
		<-ctx.Done()
		return nil
	}
	return agent.Serve(ctx, agent.Config{SID: st.SID, URLs: st.NATSURLs, TLS: id.TLSConfig(), Logger: log, Version: version.String(),
		Spool: filepath.Join(id.Dir(), "spool"), Metrics: metrics})
}
