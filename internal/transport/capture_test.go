package transport_test

import (
	"bytes"
	"testing"

	"github.com/soulstack/soulstack/internal/transport"
)

func TestCapture(t *testing.T) {
	t.Parallel()
	c := transport.NewCapture(5)
	c.Write([]byte("abc"))
	c.Write([]byte("defg"))
	c.Write([]byte("hij"))
	out, cut := c.Bytes()
	if !cut || !bytes.HasPrefix(out, []byte("abcde\n[output truncated: 5 bytes")) {
		t.Errorf("got %q, %v", out, cut)
	}
	c = transport.NewCapture(5)
	c.Write([]byte("abcde"))
	if out, cut := c.Bytes(); cut || string(out) != "abcde" {
		t.Errorf("exactly full: got %q, %v", out, cut)
	}
}
