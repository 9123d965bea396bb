package secret

import (
	"context"
	"log/slog"
)

// LogHandler wraps a slog.Handler so that every record passes through Mask:
// attributes under secret-looking keys become "***" and token patterns and
// secret text are replaced in the message and in every string value.
type LogHandler struct {
	next   slog.Handler
	set    *Set    // a run's secrets (and its keeper's); nil: keeper's alone
	keeper *Keeper // the keeper's secrets; nil: none
}

// NewLogHandler returns a handler in front of next that masks as Mask does.
func NewLogHandler(next slog.Handler) *LogHandler { return &LogHandler{next: next} }

// LogHandler returns a handler in front of next that masks as k.Mask
// does: the keeper's log.
func (k *Keeper) LogHandler(next slog.Handler) *LogHandler {
	return &LogHandler{next: next, keeper: k}
}

// LogHandler returns a handler in front of next that masks as s.Mask does:
// the log of one run.
func (s *Set) LogHandler(next slog.Handler) *LogHandler { return &LogHandler{next: next, set: s} }

// masker is what the handler masks.
func (h *LogHandler) masker() masker {
	if h.set != nil {
		return h.set.masker()
	}
	return h.keeper.masker()
}

var _ slog.Handler = (*LogHandler)(nil)

// Enabled reports whether the wrapped handler handles level.
func (h *LogHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

// Handle masks the record and passes it on.
func (h *LogHandler) Handle(ctx context.Context, r slog.Record) error {
	m := h.masker()
	out := slog.NewRecord(r.Time, r.Level, m.str(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(m.attr(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

// WithAttrs masks attrs and returns a handler that carries them.
func (h *LogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	m := h.masker()
	masked := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		masked[i] = m.attr(a)
	}
	return &LogHandler{next: h.next.WithAttrs(masked), set: h.set, keeper: h.keeper}
}

// WithGroup returns a handler that nests later attributes under name.
func (h *LogHandler) WithGroup(name string) slog.Handler {
	return &LogHandler{next: h.next.WithGroup(name), set: h.set, keeper: h.keeper}
}

func (m masker) attr(a slog.Attr) slog.Attr {
	if IsSensitiveKey(a.Key) {
		return slog.String(a.Key, Masked)
	}
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, m.str(v.String()))
	case slog.KindGroup:
		group := v.Group()
		masked := make([]any, len(group))
		for i, g := range group {
			masked[i] = m.attr(g)
		}
		return slog.Group(a.Key, masked...)
	case slog.KindAny:
		if err, ok := v.Any().(error); ok {
			return slog.String(a.Key, m.str(err.Error()))
		}
		return slog.Any(a.Key, m.mask(v.Any()))
	default:
		return slog.Attr{Key: a.Key, Value: v}
	}
}
