package secret

import (
	"fmt"
	"strings"
	"testing"
)

// TestResolvedCredentialsCannotEvictTheKeepersOwn: however many project
// credentials the keeper resolves (each masked everywhere), the keeper's
// own secrets stay masked; the flood evicts only its own kind.
func TestResolvedCredentialsCannotEvictTheKeepersOwn(t *testing.T) {
	k := NewKeeper()
	k.projects = &Set{max: 64, evict: true}
	const own = "keeper-own-ssh-key-9c41e7"
	k.Register(own)
	for i := range 200 {
		k.RegisterResolved(fmt.Sprintf("flooded-credential-%04d", i))
	}
	out := k.MaskString("key " + own + " and flooded-credential-0199 and flooded-credential-0000")
	if strings.Contains(out, own) || strings.Contains(out, "flooded-credential-0199") {
		t.Fatalf("after the flood the keeper's own secret or the newest credential shows: %s", out)
	}
	if !strings.Contains(out, "flooded-credential-0000") {
		t.Fatalf("the flood's oldest value was not the one evicted: %s", out)
	}
}
