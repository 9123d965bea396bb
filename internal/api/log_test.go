package api_test

import (
	"io"
	"log/slog"

	"github.com/soulstack/soulstack/internal/secret"
)

func secretHandler(w io.Writer) slog.Handler {
	return secret.NewLogHandler(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
