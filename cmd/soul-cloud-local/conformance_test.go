package main

import (
	"encoding/json"
	"os"
	"runtime"
	"testing"

	"github.com/soulstack/soulstack/driversdk"
	"github.com/soulstack/soulstack/driversdk/drivertest"
)

// TestConformance runs the driver SDK's conformance suite against the
// built soul-cloud-local: real VMs on this host, through a real plugin
// process.
func TestConformance(t *testing.T) {
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		t.Skipf("the local driver makes VMs only as root on Linux (this is %s, uid %d)", runtime.GOOS, os.Geteuid())
	}
	cfg, err := json.Marshal(map[string]string{"state_dir": t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	drivertest.Run(t, drivertest.Options{
		Binary:      drivertest.Build(t, "github.com/soulstack/soulstack/cmd/soul-cloud-local"),
		Provider:    driversdk.Provider{Name: "local", Config: cfg},
		Profile:     json.RawMessage(`{"cpus": 1, "memory_mb": 256}`),
		ResizeSpec:  json.RawMessage(`{"memory_mb": 512}`),
		UnknownVMID: "vm-00000000",
	})
}
