package drivertest_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/soulstack/soulstack/driversdk"
	"github.com/soulstack/soulstack/driversdk/drivertest"
)

// fakeCloud is the test-only fake cloud driver of internal/plugin.
const fakeCloud = "github.com/soulstack/soulstack/internal/plugin/internal/fakecloud/soul-cloud-fake"

func TestConformanceFakeCloud(t *testing.T) {
	t.Parallel()
	bin := drivertest.Build(t, fakeCloud)
	for _, tc := range []struct {
		name string
		caps string
	}{
		{"all-capabilities", "resize,list,idempotency"},
		{"no-capabilities", "none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			drivertest.Run(t, drivertest.Options{
				Binary:     bin,
				Provider:   driversdk.Provider{Name: "fake", Credentials: []byte("conformance-credentials")},
				Profile:    json.RawMessage(`{"cpus": 1, "memory_mb": 512}`),
				ResizeSpec: json.RawMessage(`{"cpus": 2, "memory_mb": 1024}`),
				Count:      3,
				Env:        []string{"SOULSTACK_FAKECLOUD_CAPS=" + tc.caps},
			})
		})
	}
}

// TestSuiteCatchesBrokenDrivers runs the suite (in a child test process,
// since its failures are the point) against builds of the fake cloud that
// break the contract, and checks that each breach fails the right check.
func TestSuiteCatchesBrokenDrivers(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs the suite in child processes")
	}
	bin := drivertest.Build(t, fakeCloud)
	for _, tc := range []struct {
		bug  string
		want string
	}{
		{"ignore-names", "want the requested name"},
		{"no-tags", "tags map[]"},
		{"accept-unknown-keys", "ValidateProfile accepted the unknown key"},
		{"destroy-unknown-ok", "Destroy of the unknown VM"},
		{"ignore-deadline", "the keeper killed the driver"},
		{"unchanged-downtime", "both unchanged and restarted"},
		{"no-keeper-tag", "tag soulstack.keeper = \"\", want the keeper id"},
		{"destroy-unowned", "which carries keeper"},
		{"bad-addresses", "is not in Addresses as public"},
		{"repeat-creates", "a repeated Create with the same request ID made other VMs"},
	} {
		t.Run(tc.bug, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestBrokenDriverHelper$", "-test.v")
			cmd.Env = append(os.Environ(), "DRIVERTEST_HELPER_BINARY="+bin, "DRIVERTEST_HELPER_BUG="+tc.bug)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite passed a driver with bug %s:\n%s", tc.bug, out)
			}
			if !strings.Contains(string(out), tc.want) {
				t.Fatalf("the suite failed without saying %q:\n%s", tc.want, out)
			}
		})
	}
}

// TestBrokenDriverHelper is the child of TestSuiteCatchesBrokenDrivers.
func TestBrokenDriverHelper(t *testing.T) {
	bin := os.Getenv("DRIVERTEST_HELPER_BINARY")
	if bin == "" {
		t.Skip("only run by TestSuiteCatchesBrokenDrivers")
	}
	drivertest.Run(t, drivertest.Options{
		Binary:  bin,
		Profile: json.RawMessage(`{"cpus": 1}`),
		Env:     []string{"SOULSTACK_FAKECLOUD_BUGS=" + os.Getenv("DRIVERTEST_HELPER_BUG")},
	})
}
