package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/soulstack/soulstack/driversdk"
	"github.com/soulstack/soulstack/driversdk/drivertest"
	"github.com/soulstack/soulstack/internal/drivers/qemu/qemutest"
)

// TestConformance runs the built soul-cloud-qemu as the keeper does (a
// real plugin process, gRPC through go-plugin) through the conformance
// suite, making real QEMU machines. Their disk is a blank image: the
// suite checks the driver's contract (machines that run, their addresses,
// tags, resize, destroy), not a guest's boot, which the keeper's
// end-to-end tests do on a real image.
func TestConformance(t *testing.T) {
	qemutest.Require(t)
	bin := drivertest.Build(t, "github.com/soulstack/soulstack/cmd/soul-cloud-qemu")
	images := t.TempDir()
	blank := filepath.Join(images, "blank.qcow2")
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", blank, "1G").CombinedOutput(); err != nil {
		t.Fatalf("qemu-img create: %v: %s", err, out)
	}
	state, err := os.MkdirTemp("/var/tmp", "soul-cloud-qemu-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(state) })
	// Registered before the suite's own cleanup, so it runs after it.
	t.Cleanup(func() { qemutest.NothingLeft(t, state) })
	cfg, _ := json.Marshal(map[string]any{"state_dir": state, "image_dirs": []string{images}, "shutdown_timeout": "1s",
		"images_dir": qemutest.ImagesDir()})
	drivertest.Run(t, drivertest.Options{
		Binary:      bin,
		Provider:    driversdk.Provider{Name: "qemu", Config: cfg},
		Profile:     json.RawMessage(`{"cpus": 1, "memory_mb": 256, "disk_gb": 1, "image": "` + blank + `"}`),
		ResizeSpec:  json.RawMessage(`{"memory_mb": 320}`),
		UnknownVMID: "vm-00000000",
	})
}
