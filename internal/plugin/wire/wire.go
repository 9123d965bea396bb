// Package wire is what both ends of the CloudDriver protocol share: the
// go-plugin handshake (magic cookie and protocol version), the name the
// plugin is dispensed under, the go-plugin glue that puts the generated gRPC
// service on a connection, and the deadline rule that lets a driver answer
// before the keeper gives up on it.
//
// The keeper side (internal/plugin) and the driver side (driversdk.Serve)
// both import this package, so the two can never disagree on the handshake.
//
// The protocol itself is proto/clouddriver/v1/clouddriver.proto. Its Go code
// in internal/plugin/proto/clouddriverv1 is generated and committed, so
// building needs no protoc. To regenerate it after changing the .proto, put
// protoc (Debian: protobuf-compiler), protoc-gen-go v1.36.12 and
// protoc-gen-go-grpc v1.6.0 on $PATH and run:
//
//	go generate ./internal/plugin/wire
package wire

//go:generate protoc --proto_path=../../../proto --go_out=../../.. --go_opt=module=github.com/soulstack/soulstack --go-grpc_out=../../.. --go-grpc_opt=module=github.com/soulstack/soulstack clouddriver/v1/clouddriver.proto

import (
	"context"
	"errors"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/soulstack/soulstack/internal/plugin/proto/clouddriverv1"
)

// ProtocolVersion is the version of the CloudDriver protocol this build
// speaks. Bump it on any change a peer of the previous version cannot
// understand; the keeper refuses a plugin that speaks no version it knows.
//
// Version 2 added the VM's public_ip, private_ip and addresses, and the
// provider's keeper_id: a version-1 driver would leave the keeper without
// the addresses it chooses a soul's address from, and would make VMs
// without the keeper's ownership tag.
const ProtocolVersion = 2

// Handshake is the go-plugin handshake between the keeper and a driver. The
// magic cookie is not a secret: it only keeps a plugin binary started by hand
// from waiting forever for a keeper (it prints a hint and exits instead).
// Handshake.ProtocolVersion is the one place the protocol version is set.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  ProtocolVersion,
	MagicCookieKey:   "SOULSTACK_CLOUD_DRIVER",
	MagicCookieValue: "a3f1c7e2-soul-cloud-driver",
}

// PluginName is the name the CloudDriver service is dispensed under.
const PluginName = "clouddriver"

// Plugin is the go-plugin glue for the CloudDriver service. On the driver
// side Impl is set and GRPCServer registers it; on the keeper side Impl
// is nil and GRPCClient returns a clouddriverv1.CloudDriverClient.
type Plugin struct {
	plugin.NetRPCUnsupportedPlugin
	Impl clouddriverv1.CloudDriverServer
}

var _ plugin.GRPCPlugin = (*Plugin)(nil)

// errNoServer is returned when a keeper-side Plugin is asked to serve.
var errNoServer = errors.New("wire: plugin has no CloudDriver server to register")

// GRPCServer registers the CloudDriver service on s.
func (p *Plugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	if p.Impl == nil {
		return errNoServer
	}
	clouddriverv1.RegisterCloudDriverServer(s, p.Impl)
	return nil
}

// GRPCClient returns a CloudDriver client on conn.
func (p *Plugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, conn *grpc.ClientConn) (any, error) {
	return clouddriverv1.NewCloudDriverClient(conn), nil
}

// Plugins returns the versioned plugin sets for a ServeConfig or a
// ClientConfig: ProtocolVersion mapped to the CloudDriver plugin.
func Plugins(server clouddriverv1.CloudDriverServer) map[int]plugin.PluginSet {
	return map[int]plugin.PluginSet{
		ProtocolVersion: {PluginName: &Plugin{Impl: server}},
	}
}

// DeadlineKey is the gRPC metadata key under which the keeper sends the
// deadline a driver must work to, in Unix nanoseconds. The keeper's own gRPC
// deadline is later by a grace period: a driver that honours its context
// answers (with driver.timeout) before the keeper gives up on it, and only a
// driver still busy after the grace period is taken for hung and killed.
const DeadlineKey = "soulstack-deadline-unix-nano"

// RunKey is the gRPC metadata key under which the keeper sends the id of
// the run a driver call is made for (none outside a run): the driver's log
// lines for the call carry it (driversdk, internal/logctx).
const RunKey = "soulstack-run"
