// Package driversdk is what a CloudDriver plugin author needs: the Driver
// interface to implement, the request and result types, and the error type
// whose codes the keeper reports. A driver is an executable named
// soul-cloud-<driver> whose main calls Serve with its Driver; the keeper's
// PluginHost starts it and talks to it over gRPC (hashicorp/go-plugin).
// The conformance suite in driversdk/drivertest checks a driver against
// the contract below.
//
// A driver process lives by a few rules, because it runs inside the
// keeper's plugin protocol:
//   - stdout carries the protocol: never write to it (see Serve);
//   - log with log/slog: Serve sends slog's default logger to stderr, which
//     the keeper forwards to its own log, masked;
//   - every call's context has a deadline: return when it is done, or the
//     keeper kills the process and reports driver.timeout;
//   - report failures as *Error with a stable code (the Code constants, or
//     a dotted code of the driver's own); the keeper hands them on as they
//     are. Any other error is reported as driver.failed;
//   - the provider's Credentials arrive with each call: use them in memory,
//     never log or store them;
//   - the keeper starts the process with a minimal environment (PATH, HOME,
//     TMPDIR, locale, TZ), not with its own variables;
//   - tag every VM with TagRunID, TagRequestID and TagKeeper (the caller's
//     Provider.KeeperID), and refuse Destroy and Resize of a VM whose
//     TagKeeper is another deployment's with CodeNotOwned, before changing
//     anything;
//   - report a VM's PublicIP and/or PrivateIP, each also in Addresses with
//     its Kind, and a PrimaryIP that is one of Addresses: the keeper picks
//     the soul's address from them (the address: public|private setting).
//
// A driver built with this package speaks CloudDriver protocol 2 (the
// version in internal/plugin/wire); a keeper refuses a driver of another
// version with driver.incompatible, naming both.
package driversdk

import (
	"context"
	"encoding/json"
	"fmt"
)

// Capabilities says what a driver supports beyond Create and Destroy.
type Capabilities struct {
	// Resizable drivers implement Resize; the keeper answers
	// resize.unsupported for the others without calling them.
	Resizable bool
	// IdempotencyTokens drivers treat a repeated Create with the same
	// RequestID as the same request (they return the VMs made the first
	// time instead of making new ones).
	IdempotencyTokens bool
	// Listable drivers implement List, which orphan reconciliation needs.
	Listable bool
}

// Provider is the registered provider a call is for.
type Provider struct {
	Name       string
	Region     string
	FQDNSuffix string
	// Config is the provider's driver-specific settings (a JSON object).
	Config json.RawMessage
	// Credentials is the secret the provider's credentials_ref names,
	// resolved by the keeper for this call only. Never log it.
	Credentials []byte
	// KeeperID identifies the keeper deployment making the call (the same
	// for every keeper sharing one database). Drivers tag what they make
	// with it (TagKeeper) and refuse to destroy or resize VMs that do not
	// carry it (code driver.not_owned).
	KeeperID string
}

// CreateRequest asks for Count VMs.
type CreateRequest struct {
	Provider Provider
	// RequestID identifies this request across retries and crashes; the
	// driver tags every VM it makes with it (and with RunID).
	RequestID string
	RunID     string
	// Profile is the VM spec (a JSON object) that ValidateProfile accepted.
	Profile json.RawMessage
	Count   int
	// Names, when set (len == Count), are the FQDNs the keeper predicted;
	// the driver must give VM i the name Names[i].
	Names []string
	// Userdata, when set (len == Count), is each VM's cloud-init userdata.
	Userdata []string
	// AuthorizedKeys are SSH public keys (authorized_keys lines) the VMs
	// must trust for their login user: the keeper's own key.
	AuthorizedKeys []string
}

// VM is one VM as the driver reports it.
type VM struct {
	ID   string
	FQDN string
	// PrimaryIP is the address the driver considers the VM's main one.
	PrimaryIP string
	// PublicIP is the VM's address reachable from outside its cloud
	// network; empty when it has none.
	PublicIP string
	// PrivateIP is the VM's address inside its cloud network; empty when
	// it has none or the cloud does not say.
	PrivateIP string
	// Addresses lists every address the VM has, public and private, IPv4
	// and IPv6, PublicIP and PrivateIP among them.
	Addresses []Address
	// Attributes are driver-specific facts (size, image, zone…).
	Attributes map[string]any
	// Tags are the keeper's tags the VM carries: soulstack.run_id,
	// soulstack.request_id and soulstack.keeper at least.
	Tags map[string]string
}

// Address is one of a VM's addresses.
type Address struct {
	IP string
	// Kind is AddressPublic or AddressPrivate.
	Kind string
	// Network names the cloud network, subnet or interface the address is
	// on, when the cloud says.
	Network string
}

// The kinds of Address.
const (
	AddressPublic  = "public"
	AddressPrivate = "private"
)

// Tag keys every driver sets on the VMs it creates (and, where the cloud
// allows, on every resource it makes for them). A cloud whose tag syntax
// refuses these keys uses its own spelling of them, documented by its
// driver (EC2 and OpenStack: soulstack:run_id, …).
const (
	TagRunID     = "soulstack.run_id"
	TagRequestID = "soulstack.request_id"
	TagKeeper    = "soulstack.keeper"
)

// DestroyRequest asks to destroy VMs. Destroying a VM that no longer
// exists succeeds (destroy is idempotent); an ID the driver never knew is
// an error with code vm.not_found.
type DestroyRequest struct {
	Provider Provider
	VMIDs    []string
}

// ResizeRequest asks to give VMs a new spec.
type ResizeRequest struct {
	Provider Provider
	VMIDs    []string
	Spec     json.RawMessage
}

// ResizeResult is what resizing one VM did.
type ResizeResult struct {
	VMID           string
	CausedDowntime bool
	// Unchanged reports that the VM already had the requested spec and
	// the driver did nothing to it (no call to the cloud, no restart).
	// The keeper reports a resize step unchanged when every VM is; a
	// driver that never sets it has every VM counted as resized.
	Unchanged bool
}

// ListRequest lists the driver's VMs carrying every tag in Tags (all of
// them when Tags is empty).
type ListRequest struct {
	Provider Provider
	Tags     map[string]string
}

// Driver is a cloud backend. Every method gets a context with a deadline
// and must honour it. Errors should be *Error with a stable code; other
// errors are reported with code driver.failed.
type Driver interface {
	Capabilities(ctx context.Context) (Capabilities, error)
	// ValidateProfile checks a profile spec (and the provider's config)
	// before any VM is made: unknown keys, bad values, and whether the
	// driver can work at all on this host. Problems are *Error with code
	// profile.invalid naming the field.
	ValidateProfile(ctx context.Context, p Provider, profile json.RawMessage) error
	Create(ctx context.Context, req CreateRequest) ([]VM, error)
	Destroy(ctx context.Context, req DestroyRequest) error
	// Resize is called only when Capabilities().Resizable.
	Resize(ctx context.Context, req ResizeRequest) ([]ResizeResult, error)
	// List is called only when Capabilities().Listable.
	List(ctx context.Context, req ListRequest) ([]VM, error)
}

// Error is a driver failure with a stable dotted code, such as
// profile.invalid, vm.not_found, quota.exceeded or driver.unavailable.
type Error struct {
	Code    string
	Message string
	// Field names the profile or config field at fault, when there is one.
	Field string
}

func (e *Error) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("%s: %s: %s", e.Code, e.Field, e.Message)
	}
	return e.Code + ": " + e.Message
}

// Errorf returns an *Error with code and a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}
