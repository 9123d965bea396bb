package keeper

import (
	"context"
	"net"
	"net/url"

	"github.com/soulstack/soulstack/internal/config"
	"github.com/soulstack/soulstack/internal/store"
)

// soulDrivers finds the driver a soul was made with.
type soulDrivers interface {
	SoulGet(ctx context.Context, sid string) (store.Soul, error)
	ProviderGet(ctx context.Context, name string) (store.Provider, error)
}

// agentBusURLs returns where each soul reaches the bus, for its join
// answer: nats.advertise or the external cluster's URLs when given, else
// the embedded bus's port on the host the soul reaches the keeper at:
// soulstack-local-gateway for local VMs, else advertise_url's host, else
// keeper_url's, like the agent listener's URL.
func agentBusURLs(c config.Config, side *agentSide, port string, busURLs func() []string, st soulDrivers) func(ctx context.Context, sid string) []string {
	if c.NATS.External() || len(c.NATS.Advertise) > 0 {
		return func(context.Context, string) []string { return busURLs() }
	}
	listenHost, _, _ := net.SplitHostPort(c.NATS.Listen)
	return func(ctx context.Context, sid string) []string {
		driver := ""
		if so, err := st.SoulGet(ctx, sid); err == nil && so.Provider != "" {
			if p, err := st.ProviderGet(ctx, so.Provider); err == nil {
				driver = p.Driver
			}
		}
		host := listenHost
		switch {
		case onHost(driver):
			host = LocalGatewayName
		case side != nil && side.advertise != "":
			// Where souls reach the agent listener (advertise_url), they
			// reach the bus beside it.
			if u, err := url.Parse(side.advertise); err == nil && u.Hostname() != "" {
				host = u.Hostname()
			}
		case side != nil && side.fallbackHost != "":
			host = side.fallbackHost
		}
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			// Listening on every address names none a soul can dial: the
			// agent listener's advertised host is the best guess.
			if side != nil && side.ln != nil {
				host = LocalGatewayName
			} else {
				return busURLs()
			}
		}
		return []string{"tls://" + net.JoinHostPort(host, port)}
	}
}
