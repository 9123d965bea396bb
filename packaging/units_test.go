package packaging_test

import (
	"os/exec"
	"regexp"
	"strconv"
	"testing"
)

// TestUnitExposure: systemd's own judge of the units' sandboxes
// (systemd-analyze security, offline, on the unit files as packaged)
// scores the keeper and the backup service at most 2.0. The VM keeper and
// the agent are judged in TestPackagesOnDebian's notes and SECURITY.md:
// their children are VMs and host commands that need the host.
func TestUnitExposure(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Fatal("systemd-analyze not found: install systemd (scripts/test does)")
	}
	overall := regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+)`)
	for unit, most := range map[string]float64{
		"systemd/soulstack-keeper.service":        2.0,
		"systemd/soulstack-keeper-backup.service": 2.0,
	} {
		out, err := exec.Command("systemd-analyze", "security", "--offline=true", "--no-pager", unit).CombinedOutput()
		m := overall.FindSubmatch(out)
		if m == nil {
			t.Fatalf("systemd-analyze security %s: %v\n%s", unit, err, out)
		}
		score, _ := strconv.ParseFloat(string(m[1]), 64)
		if score > most {
			t.Errorf("%s: exposure %.1f, want at most %.1f\n%s", unit, score, most, out)
		}
	}
}
