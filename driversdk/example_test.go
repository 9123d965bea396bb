package driversdk_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/soulstack/soulstack/driversdk"
)

// tinyCloud is the shape of a driver: one type with the six methods.
type tinyCloud struct{}

var _ driversdk.Driver = (*tinyCloud)(nil)

func (tinyCloud) Capabilities(context.Context) (driversdk.Capabilities, error) {
	return driversdk.Capabilities{Listable: true}, nil
}

func (tinyCloud) ValidateProfile(_ context.Context, _ driversdk.Provider, profile json.RawMessage) error {
	var spec struct {
		Size string `json:"size"`
	}
	if err := json.Unmarshal(profile, &spec); err != nil {
		return driversdk.InvalidProfile("", err.Error())
	}
	if spec.Size == "" {
		return driversdk.InvalidProfile("size", "size is required")
	}
	return nil
}

func (tinyCloud) Create(ctx context.Context, req driversdk.CreateRequest) ([]driversdk.VM, error) {
	slog.InfoContext(ctx, "creating VMs", "count", req.Count, "request_id", req.RequestID)
	// Call the cloud's API with req.Provider.Credentials here, tagging each
	// VM with driversdk.TagRunID and driversdk.TagRequestID.
	return nil, driversdk.Errorf(driversdk.CodeDriverUnavailable, "this example has no cloud")
}

func (tinyCloud) Destroy(context.Context, driversdk.DestroyRequest) error { return nil }

func (tinyCloud) Resize(context.Context, driversdk.ResizeRequest) ([]driversdk.ResizeResult, error) {
	return nil, driversdk.Errorf(driversdk.CodeResizeUnsupported, "not resizable")
}

func (tinyCloud) List(context.Context, driversdk.ListRequest) ([]driversdk.VM, error) {
	return nil, nil
}

// A driver's main serves it; the keeper starts the executable
// (soul-cloud-tiny, in its plugin dir or $PATH) when a provider uses driver
// "tiny".
func ExampleServe() {
	driversdk.Serve(tinyCloud{})
}

// The keeper hands a driver's errors back with their code and field; a
// caller branches on the code.
func ExampleCodeOf() {
	err := fmt.Errorf("validate profile %q: %w", "small", tinyCloud{}.ValidateProfile(context.Background(), driversdk.Provider{}, json.RawMessage(`{}`)))
	fmt.Println(driversdk.CodeOf(err))
	fmt.Println(errors.Is(err, &driversdk.Error{Code: driversdk.CodeProfileInvalid}))
	fmt.Println(err)
	// Output:
	// profile.invalid
	// true
	// validate profile "small": profile.invalid: size: size is required
}
