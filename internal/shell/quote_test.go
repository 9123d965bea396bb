package shell_test

import (
	"fmt"
	"os/exec"
	"testing"

	"github.com/soulstack/soulstack/internal/shell"
)

func ExampleQuote() {
	fmt.Println(shell.Quote("/etc/hosts"))
	fmt.Println(shell.Quote("it's $HOME"))
	fmt.Println(shell.Quote(""))
	// Output:
	// /etc/hosts
	// 'it'\''s $HOME'
	// ''
}

// Every quoted word reads back, through a real /bin/sh, as itself.
func TestQuoteRoundTrip(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "plain", "'; touch /tmp/pwned; '", "a\nb", "$(id) `id` \\ \"", "ü ✓", "''''", "-n", "*"} {
		out, err := exec.Command("/bin/sh", "-c", "printf '%s' "+shell.Quote(s)).Output()
		if err != nil || string(out) != s {
			t.Errorf("Quote(%q) = %s: the shell read %q (%v)", s, shell.Quote(s), out, err)
		}
	}
}
