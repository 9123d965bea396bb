package cli

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestEveryCommandHasAnExample: each command that does something (not a
// group of commands) shows how it is called, and each example names that
// command and parses with its flags.
func TestEveryCommandHasAnExample(t *testing.T) {
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		if !c.Runnable() || c.HasSubCommands() || c.Hidden || c.Name() == "help" || c.Parent() != nil && c.Parent().Name() == "completion" {
			return
		}
		path := c.CommandPath()
		if c.Example == "" {
			t.Errorf("%s has no Example", path)
			return
		}
		mine := false
		for _, line := range strings.Split(c.Example, "\n") {
			line, _, _ = strings.Cut(strings.TrimSpace(line), "   #") // a trailing comment
			line, _, _ = strings.Cut(line, " > ")                     // a redirection
			line, _, _ = strings.Cut(line, " && ")                    // a second command
			if !strings.HasPrefix(line, "soulctl ") {
				continue // shell around a command (VAR=$(soulctl …))
			}
			args, ok := shellWords(line)
			if !ok {
				t.Errorf("%s: example %q does not split into words", path, line)
				continue
			}
			found, rest, err := (&app{}).rootCommand().Find(args[1:])
			if err != nil || !found.Runnable() || found.HasSubCommands() {
				t.Errorf("%s: example %q is no soulctl command (%v)", path, line, err)
				continue
			}
			mine = mine || found.CommandPath() == path
			if err := found.ParseFlags(rest); err != nil {
				t.Errorf("%s: example %q: %v", path, line, err)
			}
		}
		if !mine {
			t.Errorf("%s: no example runs it", path)
		}
	}
	walk((&app{}).rootCommand())
}

// shellWords splits a command line as sh does for words in single or
// double quotes (no escapes, no expansions): enough for the examples.
func shellWords(s string) ([]string, bool) {
	var out []string
	var word strings.Builder
	in, quote := false, rune(0)
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			word.WriteRune(r)
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				out = append(out, word.String())
				word.Reset()
				in = false
			}
		default:
			word.WriteRune(r)
			in = true
		}
	}
	if in {
		out = append(out, word.String())
	}
	return out, quote == 0
}
