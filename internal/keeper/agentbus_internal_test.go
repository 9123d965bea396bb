package keeper

import (
	"context"
	"slices"
	"testing"

	"github.com/soulstack/soulstack/internal/config"
	"github.com/soulstack/soulstack/internal/store"
)

// registry is the two lookups agentBusURLs makes.
type registry struct {
	souls     map[string]store.Soul
	providers map[string]store.Provider
}

func (r registry) SoulGet(_ context.Context, sid string) (store.Soul, error) {
	if so, ok := r.souls[sid]; ok {
		return so, nil
	}
	return store.Soul{}, store.ErrNotFound
}

func (r registry) ProviderGet(_ context.Context, name string) (store.Provider, error) {
	if p, ok := r.providers[name]; ok {
		return p, nil
	}
	return store.Provider{}, store.ErrNotFound
}

// TestAgentBusURLs: each soul is told the bus where it reaches the keeper —
// local VMs at the bridge gateway's name, others beside the agent
// listener's advertised host — unless nats.advertise says otherwise.
func TestAgentBusURLs(t *testing.T) {
	t.Parallel()
	reg := registry{
		souls: map[string]store.Soul{
			"vm-1.local.test": {SID: "vm-1.local.test", Provider: "lab"},
			"web-1.aws.test":  {SID: "web-1.aws.test", Provider: "aws"},
			"hand.example":    {SID: "hand.example"},
		},
		providers: map[string]store.Provider{"lab": {Name: "lab", Driver: "local"}, "aws": {Name: "aws", Driver: "aws"}},
	}
	fixed := func() []string { return []string{"tls://nats.example:4222"} }
	listening := &agentSide{advertise: "https://keeper.example.com:8421", fallbackHost: "127.0.0.1"}
	c := config.Config{NATS: config.NATS{Listen: "0.0.0.0:8422"}}
	for _, tc := range []struct {
		name string
		c    config.Config
		side *agentSide
		sid  string
		want string
	}{
		{"local VM", c, listening, "vm-1.local.test", "tls://soulstack-local-gateway:8422"},
		{"cloud VM beside advertise_url", c, listening, "web-1.aws.test", "tls://keeper.example.com:8422"},
		{"hand-joined beside advertise_url", c, listening, "hand.example", "tls://keeper.example.com:8422"},
		{"keeper_url host without advertise_url", c, &agentSide{fallbackHost: "keeper.lan"}, "web-1.aws.test", "tls://keeper.lan:8422"},
		{"a bus on one address", config.Config{NATS: config.NATS{Listen: "10.0.0.5:8422"}}, &agentSide{}, "hand.example", "tls://10.0.0.5:8422"},
		{"nats.advertise wins", config.Config{NATS: config.NATS{Listen: "0.0.0.0:8422", Advertise: []string{"tls://nats.example:4222"}}}, listening, "vm-1.local.test", "tls://nats.example:4222"},
	} {
		got := agentBusURLs(tc.c, tc.side, "8422", fixed, reg)(t.Context(), tc.sid)
		if !slices.Equal(got, []string{tc.want}) {
			t.Errorf("%s: %v, want [%s]", tc.name, got, tc.want)
		}
	}
}
