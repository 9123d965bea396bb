package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"

	"github.com/soulstack/soulstack/internal/secret"
)

// maxLineLen bounds one plugin log line; the rest of a longer line is
// dropped and the record says it was truncated.
const maxLineLen = 16 << 10

// tailLines is how many of a plugin's last stderr lines are kept for the
// error of a failed start.
const tailLines = 5

// lineLogger turns what a plugin writes into one log record per line. A
// line that is a JSON object with a string "@message" (the hclog JSON
// format driversdk.Serve's logger writes) keeps its level and attributes;
// any other line is logged as text at the stream's level. Records go through
// the host's masking logger.
type lineLogger struct {
	secrets *secret.Keeper // masked in the kept tail
	log     *slog.Logger
	stream  string
	level   slog.Level
	pid     atomic.Int64

	mu        sync.Mutex
	buf       []byte
	truncated bool
	last      []string
}

var _ io.Writer = (*lineLogger)(nil)

func newLineLogger(log *slog.Logger, secrets *secret.Keeper, stream string, level slog.Level) *lineLogger {
	return &lineLogger{log: log, secrets: secrets, stream: stream, level: level}
}

func (w *lineLogger) setPID(pid int) { w.pid.Store(int64(pid)) }

// Write logs every complete line in b and keeps the rest for the next
// Write. It never fails, so the plugin is never blocked on an error.
func (w *lineLogger) Write(b []byte) (int, error) {
	n := len(b)
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		chunk := b
		if i >= 0 {
			chunk = b[:i]
		}
		if room := maxLineLen - len(w.buf); len(chunk) > room {
			chunk = chunk[:max(room, 0)]
			w.truncated = true
		}
		w.buf = append(w.buf, chunk...)
		if i < 0 {
			break
		}
		w.emit()
		b = b[i+1:]
	}
	return n, nil
}

// flush logs a last line that had no newline.
func (w *lineLogger) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) > 0 {
		w.emit()
	}
}

// tail returns the last few lines, masked.
func (w *lineLogger) tail() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.last)
}

// emit logs the buffered line; the caller holds mu.
func (w *lineLogger) emit() {
	line := strings.TrimRight(string(w.buf), "\r")
	truncated := w.truncated
	w.buf, w.truncated = w.buf[:0], false
	if strings.TrimSpace(line) == "" {
		return
	}
	w.last = append(w.last, w.secrets.MaskString(line))
	if len(w.last) > tailLines {
		w.last = w.last[1:]
	}

	level, msg, attrs := w.level, line, []slog.Attr(nil)
	if e, ok := parseLogLine(line); ok {
		level, msg, attrs = e.level, e.msg, e.attrs
	} else {
		attrs = append(attrs, slog.String("stream", w.stream))
	}
	if pid := w.pid.Load(); pid != 0 {
		attrs = append(attrs, slog.Int64("pid", pid))
	}
	if truncated {
		attrs = append(attrs, slog.Bool("truncated", true))
	}
	w.log.LogAttrs(context.Background(), level, msg, attrs...)
}

// logEntry is a parsed JSON log line.
type logEntry struct {
	level slog.Level
	msg   string
	attrs []slog.Attr
}

// parseLogLine reads one line in the hclog JSON format. It accepts any
// JSON object whose "@message" is a string; other "@" keys are dropped and
// the remaining keys become attributes, sorted.
func parseLogLine(line string) (logEntry, bool) {
	if !strings.HasPrefix(line, "{") {
		return logEntry{}, false
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		return logEntry{}, false
	}
	msg, ok := m["@message"].(string)
	if !ok {
		return logEntry{}, false
	}
	lvl, _ := m["@level"].(string)
	e := logEntry{level: levelOf(lvl), msg: msg}
	keys := make([]string, 0, len(m))
	for k := range m {
		if !strings.HasPrefix(k, "@") && k != "timestamp" {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		e.attrs = append(e.attrs, slog.Any(k, m[k]))
	}
	return e, true
}

// levelTrace is the slog level of hclog's trace.
const levelTrace = slog.LevelDebug - 4

// levelOf maps an hclog level name to a slog level (info when unknown).
func levelOf(name string) slog.Level {
	switch strings.ToLower(name) {
	case "trace":
		return levelTrace
	case "debug":
		return slog.LevelDebug
	case "warn", "warning":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}

// hcLogger is the hclog.Logger go-plugin logs through: its records go to the
// host's slog logger. The logger go-plugin names after the plugin binary
// (off) is the one it would parse the plugin's stderr with; it is turned
// off, because the host parses stderr itself (lineLogger).
type hcLogger struct {
	log   *slog.Logger
	name  string
	args  []any
	off   string
	level hclog.Level
}

var _ hclog.Logger = (*hcLogger)(nil)

func newHCLogger(log *slog.Logger, off string) *hcLogger {
	return &hcLogger{log: log, off: off, level: hclog.Trace}
}

func (l *hcLogger) Log(level hclog.Level, msg string, args ...any) {
	if l.level == hclog.Off || level < l.level {
		return
	}
	var lvl slog.Level
	switch level {
	case hclog.Trace:
		lvl = levelTrace
	case hclog.Debug:
		lvl = slog.LevelDebug
	case hclog.Warn:
		lvl = slog.LevelWarn
	case hclog.Error:
		lvl = slog.LevelError
	default:
		lvl = slog.LevelInfo
	}
	all := make([]any, 0, len(l.args)+len(args)+2)
	if l.name != "" {
		all = append(all, "logger", l.name)
	}
	all = append(all, l.args...)
	all = append(all, args...)
	l.log.Log(context.Background(), lvl, msg, all...)
}

func (l *hcLogger) Trace(msg string, args ...any) { l.Log(hclog.Trace, msg, args...) }
func (l *hcLogger) Debug(msg string, args ...any) { l.Log(hclog.Debug, msg, args...) }
func (l *hcLogger) Info(msg string, args ...any)  { l.Log(hclog.Info, msg, args...) }
func (l *hcLogger) Warn(msg string, args ...any)  { l.Log(hclog.Warn, msg, args...) }
func (l *hcLogger) Error(msg string, args ...any) { l.Log(hclog.Error, msg, args...) }

func (l *hcLogger) enabled(level slog.Level) bool {
	return l.level != hclog.Off && l.log.Enabled(context.Background(), level)
}

func (l *hcLogger) IsTrace() bool { return l.enabled(levelTrace) }
func (l *hcLogger) IsDebug() bool { return l.enabled(slog.LevelDebug) }
func (l *hcLogger) IsInfo() bool  { return l.enabled(slog.LevelInfo) }
func (l *hcLogger) IsWarn() bool  { return l.enabled(slog.LevelWarn) }
func (l *hcLogger) IsError() bool { return l.enabled(slog.LevelError) }

func (l *hcLogger) ImpliedArgs() []any { return slices.Clone(l.args) }

func (l *hcLogger) With(args ...any) hclog.Logger {
	c := *l
	c.args = append(slices.Clone(l.args), args...)
	return &c
}

func (l *hcLogger) Name() string { return l.name }

func (l *hcLogger) Named(name string) hclog.Logger {
	c := *l
	if name == l.off {
		c.level = hclog.Off
	}
	if c.name != "" {
		name = c.name + "." + name
	}
	c.name = name
	return &c
}

func (l *hcLogger) ResetNamed(name string) hclog.Logger {
	c := *l
	c.name = name
	return &c
}

// SetLevel does nothing: the host's slog handler decides what is logged.
func (l *hcLogger) SetLevel(hclog.Level) {}

func (l *hcLogger) GetLevel() hclog.Level { return l.level }

func (l *hcLogger) StandardLogger(*hclog.StandardLoggerOptions) *log.Logger {
	return slog.NewLogLogger(l.log.Handler(), slog.LevelInfo)
}

func (l *hcLogger) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	return l.StandardLogger(opts).Writer()
}
