package localcloud

import "testing"

func TestCgroupMount(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		m        cgroupMount
		serves   string
		want     bool
		tracking bool
	}{
		{"memory", cgroupMount{controllers: []string{"memory"}}, "memory", true, false},
		{"co-mounted", cgroupMount{controllers: []string{"cpu", "cpuacct"}}, "cpu,cpuacct", true, false},
		{"other controller", cgroupMount{controllers: []string{"cpu"}}, "memory", false, false},
		{"named", cgroupMount{controllers: []string{"xattr", "name=systemd"}}, "name=systemd", true, true},
		{"unified", cgroupMount{v2: true}, "", true, true},
		{"unified is not v1", cgroupMount{v2: true}, "memory", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.m.serves(tc.serves); got != tc.want {
				t.Errorf("serves(%q) = %v", tc.serves, got)
			}
			if got := tc.m.tracking(); got != tc.tracking {
				t.Errorf("tracking() = %v", got)
			}
		})
	}
	if got := unescapeMount(`/mnt/a\040b\134c`); got != `/mnt/a b\c` {
		t.Errorf("unescapeMount = %q", got)
	}
}

func TestDetectCgroups(t *testing.T) {
	t.Parallel()
	h, err := detectCgroups()
	if err != nil {
		t.Skipf("no usable cgroups here: %v", err)
	}
	if len(h.parents) == 0 {
		t.Fatal("no cgroup parents")
	}
	for _, p := range h.parents {
		t.Logf("v2=%v parent %s", h.v2, p)
	}
}
