// Command soul-cloud-fake serves the FAKE cloud of package fakecloud as a
// CloudDriver plugin, for tests. SOULSTACK_FAKECLOUD_HANDSHAKE makes it a
// bad plugin instead:
//
//	v1       speak only CloudDriver protocol version 1 (an old driver: no
//	         addresses, no keeper id)
//	future   speak only a CloudDriver protocol version after this build's
//	garbage  print a line that is not a handshake
//	exit     exit with status 2 before the handshake
//	sleep    never complete the handshake
package main

import (
	"fmt"
	"os"
	"time"

	"github.com/hashicorp/go-plugin"

	"github.com/soulstack/soulstack/driversdk"
	"github.com/soulstack/soulstack/internal/plugin/internal/fakecloud"
	pb "github.com/soulstack/soulstack/internal/plugin/proto/clouddriverv1"
	"github.com/soulstack/soulstack/internal/plugin/wire"
)

func main() {
	switch os.Getenv("SOULSTACK_FAKECLOUD_HANDSHAKE") {
	case "v1":
		serveVersion(1)
	case "future":
		serveVersion(wire.ProtocolVersion + 1)
	case "garbage":
		fmt.Println("hello from a program that is not a plugin")
	case "sleep":
		time.Sleep(time.Hour)
	case "exit":
		fmt.Fprintln(os.Stderr, "fake cloud: refusing to start")
		os.Exit(2)
	default:
		driversdk.Serve(fakecloud.New())
	}
}

// serveVersion serves a CloudDriver that speaks only protocol version v.
func serveVersion(v int) {
	hs := wire.Handshake
	hs.ProtocolVersion = uint(v)
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: hs,
		VersionedPlugins: map[int]plugin.PluginSet{
			v: {wire.PluginName: &wire.Plugin{Impl: pb.UnimplementedCloudDriverServer{}}},
		},
		GRPCServer: plugin.DefaultGRPCServer,
	})
}
