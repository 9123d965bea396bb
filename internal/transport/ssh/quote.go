package ssh

import (
	"strings"

	"github.com/soulstack/soulstack/internal/shell"
)

// Quote returns s quoted for a POSIX shell, so that the shell reads it back
// as exactly one word equal to s; it is shell.Quote, which the scenario
// function quote(s) uses too. s must not contain a NUL byte.
func Quote(s string) string { return shell.Quote(s) }

// quoteArgs quotes each word and joins them with spaces.
func quoteArgs(args []string) string {
	var b strings.Builder
	for i, a := range args {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(shell.Quote(a))
	}
	return b.String()
}
