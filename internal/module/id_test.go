package module

import (
	"errors"
	"testing"
)

func TestParseID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in string
		ok       bool
	}{
		{"valid", "core.cloud.created", true},
		{"digits and underscores", "my_ns.pkg2.installed_now", true},
		{"empty", "", false},
		{"two parts", "core.cloud", false},
		{"four parts", "core.cloud.created.now", false},
		{"upper case", "core.Cloud.created", false},
		{"leading digit", "core.2cloud.created", false},
		{"empty segment", "core..created", false},
		{"dash", "core.cloud-x.created", false},
		{"space", "core.cloud.created ", false},
		{"long segment", "core." + string(make([]byte, 64)) + ".x", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			id, err := ParseID(tt.in)
			if tt.ok {
				if err != nil || string(id) != tt.in {
					t.Fatalf("ParseID(%q) = %q, %v; want it back, nil", tt.in, id, err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidID) {
				t.Fatalf("ParseID(%q) error = %v; want ErrInvalidID", tt.in, err)
			}
		})
	}
}

func TestIDParts(t *testing.T) {
	t.Parallel()
	id := ID("core.cloud.created")
	if id.Namespace() != "core" || id.Module() != "cloud" || id.State() != "created" || id.Family() != "core.cloud" {
		t.Fatalf("parts of %s = %q %q %q %q", id, id.Namespace(), id.Module(), id.State(), id.Family())
	}
	bad := ID("nope")
	if bad.Namespace() != "" || bad.Family() != "" || bad.Valid() {
		t.Fatalf("parts of invalid id should be empty")
	}
}
