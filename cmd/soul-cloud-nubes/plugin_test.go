package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/soulstack/soulstack/driversdk"
	"github.com/soulstack/soulstack/driversdk/drivertest"
	"github.com/soulstack/soulstack/internal/drivers/nubes/nubesfake"
)

func TestMain(m *testing.M) {
	drivertest.Main(m, "github.com/soulstack/soulstack/cmd/soul-cloud-nubes")
}

// TestConformance runs the driver conformance suite against the real
// plugin process and the deck-api's fake.
func TestConformance(t *testing.T) {
	t.Parallel()
	f := nubesfake.New("conformance-token")
	t.Cleanup(f.Close)
	cfg, _ := json.Marshal(map[string]any{"endpoint": f.URL, "vapp_uid": "vapp-1", "poll_interval": "5ms", "retry_base": "5ms"})
	drivertest.Run(t, drivertest.Options{
		Binary:      drivertest.Plugin(t, "nubes"),
		Provider:    driversdk.Provider{Name: "nubes", FQDNSuffix: "nubes.test", Config: cfg, Credentials: []byte("conformance-token")},
		Profile:     json.RawMessage(`{"cpus": 1, "memory_gb": 1, "image": "Debian_13-20G", "user": "debian"}`),
		ResizeSpec:  json.RawMessage(`{"cpus": 2, "memory_gb": 2}`),
		UnknownVMID: "not-an-instance-uid",
		Timeout:     time.Minute,
	})
}
