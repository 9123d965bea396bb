package secret

import (
	"context"
	"log/slog"
)

// LogHandler wraps a slog.Handler so that every record passes through Mask:
// attributes under secret-looking keys become "***" and registered secret
// text is replaced in the message and in every string value.
type LogHandler struct {
	next slog.Handler
}

// NewLogHandler returns a masking handler in front of next.
func NewLogHandler(next slog.Handler) *LogHandler { return &LogHandler{next: next} }

var _ slog.Handler = (*LogHandler)(nil)

// Enabled reports whether the wrapped handler handles level.
func (h *LogHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

// Handle masks the record and passes it on.
func (h *LogHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, MaskString(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(maskAttr(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

// WithAttrs masks attrs and returns a handler that carries them.
func (h *LogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	masked := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		masked[i] = maskAttr(a)
	}
	return &LogHandler{next: h.next.WithAttrs(masked)}
}

// WithGroup returns a handler that nests later attributes under name.
func (h *LogHandler) WithGroup(name string) slog.Handler {
	return &LogHandler{next: h.next.WithGroup(name)}
}

func maskAttr(a slog.Attr) slog.Attr {
	if IsSensitiveKey(a.Key) {
		return slog.String(a.Key, Masked)
	}
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, MaskString(v.String()))
	case slog.KindGroup:
		group := v.Group()
		masked := make([]any, len(group))
		for i, g := range group {
			masked[i] = maskAttr(g)
		}
		return slog.Group(a.Key, masked...)
	case slog.KindAny:
		if err, ok := v.Any().(error); ok {
			return slog.String(a.Key, MaskString(err.Error()))
		}
		return slog.Any(a.Key, Mask(v.Any()))
	default:
		return slog.Attr{Key: a.Key, Value: v}
	}
}
