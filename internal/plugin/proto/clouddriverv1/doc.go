// Package clouddriverv1 is the Go code generated from
// proto/clouddriver/v1/clouddriver.proto: the CloudDriver gRPC service
// between the keeper and its driver plugins. Only internal/plugin and the
// driver SDK's adapter (driversdk/serve.go) use these types; everything else
// sees the driversdk types. Regenerate with `go generate ./internal/plugin/wire`.
package clouddriverv1
