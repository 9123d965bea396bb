package cloud

import (
	"encoding/json"
	"testing"
)

// TestSizeOfCountsFractionsUp: what a profile asks counts toward a
// quota rounded up, whatever its JSON shape; half a vCPU is one, never
// none.
func TestSizeOfCountsFractionsUp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		spec         string
		vcpus, memMB int
	}{
		{`{"cpus": 2, "memory_mb": 512}`, 2, 512},
		{`{"cpus": 0.5, "memory_mb": 256.2}`, 1, 257},
		{`{"vcpus": 1.01}`, 2, 0},
		{`{"cpus": "3", "memory_mb": "1024"}`, 3, 1024},
		{`{"cpus": "0.25"}`, 1, 0},
		{`{"cpus": -4, "memory_mb": "lots"}`, 0, 0},
		{`{"instance_type": "t3.micro"}`, 0, 0},
		{`[1, 2]`, 0, 0},
	} {
		v, m := sizeOf(json.RawMessage(tc.spec))
		if v != tc.vcpus || m != tc.memMB {
			t.Errorf("sizeOf(%s) = %d vCPUs, %d MB; want %d, %d", tc.spec, v, m, tc.vcpus, tc.memMB)
		}
	}
}
