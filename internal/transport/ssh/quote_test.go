package ssh_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/soulstack/soulstack/internal/sshtest"
	"github.com/soulstack/soulstack/internal/transport/ssh"
)

// awkward are arguments a shell would mangle if quoting were wrong.
var awkward = []string{
	"plain",
	"two words",
	"",
	"'",
	"it's",
	`"double"`,
	`$HOME ${PATH} $(id) $0 $$ $? $@`,
	"`id`",
	`back\slash \\ \n \'`,
	"new\nline\n",
	"tab\there",
	"ünïcödé ✓ 日本",
	"*?[a-z]{1,2}~!#&;|<>()",
	"-n",
	"--",
	"a=b",
	"%s\\0",
	" leading and trailing ",
	"''''",
	"\x01\x7f\xff",
}

func TestQuote(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"", "''"},
		{"abc", "abc"},
		{"/usr/bin/env", "/usr/bin/env"},
		{"a b", "'a b'"},
		{"it's", `'it'\''s'`},
		{"$x", "'$x'"},
		{"a=b", "'a=b'"},
		{"~", "'~'"},
		{"ü", "'ü'"},
		{"'", `''\'''`},
	}
	for _, tt := range tests {
		if got := ssh.Quote(tt.in); got != tt.want {
			t.Errorf("Quote(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

// TestQuoteRoundTrip sends awkward arguments through a real sshd and the
// remote shell and compares the bytes printf gives back.
func TestQuoteRoundTrip(t *testing.T) {
	t.Parallel()
	c := connect(t, sshtest.Start(t, sshtest.Options{}), ssh.Options{})
	want := []byte(strings.Join(awkward, "\x00") + "\x00")

	t.Run("argv", func(t *testing.T) {
		t.Parallel()
		res := exec(t, c, ssh.Command{Argv: append([]string{"printf", `%s\0`}, awkward...)})
		if res.ExitCode != 0 || !bytes.Equal(res.Stdout, want) {
			t.Errorf("exit %d stderr %q\n got %q\nwant %q", res.ExitCode, res.Stderr, res.Stdout, want)
		}
	})
	t.Run("script", func(t *testing.T) {
		t.Parallel()
		var script strings.Builder
		script.WriteString(`printf '%s\0'`)
		for _, a := range awkward {
			script.WriteString(" " + ssh.Quote(a))
		}
		res := exec(t, c, ssh.Command{Script: script.String()})
		if res.ExitCode != 0 || !bytes.Equal(res.Stdout, want) {
			t.Errorf("exit %d stderr %q\n got %q\nwant %q", res.ExitCode, res.Stderr, res.Stdout, want)
		}
	})
	t.Run("env", func(t *testing.T) {
		t.Parallel()
		env := make(map[string]string)
		var script strings.Builder
		script.WriteString(`printf '%s\0'`)
		for i, v := range awkward {
			name := fmt.Sprintf("V%d", i)
			env[name] = v
			script.WriteString(` "$` + name + `"`)
		}
		res := exec(t, c, ssh.Command{Script: script.String(), Env: env})
		if res.ExitCode != 0 || !bytes.Equal(res.Stdout, want) {
			t.Errorf("exit %d stderr %q\n got %q\nwant %q", res.ExitCode, res.Stderr, res.Stdout, want)
		}
	})
}
