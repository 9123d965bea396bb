// Package logctx carries the run a piece of work belongs to in its context,
// so that every log line written for a run names it: the keeper's handler
// (Handler) adds the run id of the context a record is logged with, and the
// plugin host sends it to a driver process (wire.RunKey), whose driversdk
// handler does the same.
package logctx

import (
	"context"
	"log/slog"
)

// RunKey is the attribute a run's id is logged under.
const RunKey = "run"

type runKey struct{}

// WithRun returns ctx carrying the run id.
func WithRun(ctx context.Context, id string) context.Context {
	if id == "" {
		return ctx
	}
	return context.WithValue(ctx, runKey{}, id)
}

// Run returns the run id ctx carries, or "".
func Run(ctx context.Context) string {
	if ctx == nil {
		return ""
	}
	id, _ := ctx.Value(runKey{}).(string)
	return id
}

// Handler wraps h: a record logged with a context that carries a run gets
// a "run" attribute, unless the logger or the record already has one.
func Handler(h slog.Handler) slog.Handler { return &handler{h: h} }

type handler struct {
	h      slog.Handler
	hasRun bool // a "run" attribute was added by With
}

func (h *handler) Enabled(ctx context.Context, l slog.Level) bool { return h.h.Enabled(ctx, l) }

func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	if id := Run(ctx); id != "" && !h.hasRun && !recordHasRun(r) {
		r = r.Clone()
		r.AddAttrs(slog.String(RunKey, id))
	}
	return h.h.Handle(ctx, r)
}

func (h *handler) WithAttrs(as []slog.Attr) slog.Handler {
	has := h.hasRun
	for _, a := range as {
		has = has || a.Key == RunKey
	}
	return &handler{h: h.h.WithAttrs(as), hasRun: has}
}

func (h *handler) WithGroup(name string) slog.Handler {
	return &handler{h: h.h.WithGroup(name), hasRun: h.hasRun}
}

func recordHasRun(r slog.Record) bool {
	found := false
	r.Attrs(func(a slog.Attr) bool {
		found = a.Key == RunKey
		return !found
	})
	return found
}
