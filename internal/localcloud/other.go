//go:build !linux

package localcloud

import (
	"context"
	"encoding/json"
	"runtime"

	"github.com/soulstack/soulstack/driversdk"
)

// On other systems than Linux the driver only says it cannot work here.

func geteuid() int { return -1 }

func runChild() {}

func errUnavailable() error {
	return &driversdk.Error{Code: codeUnavailable, Message: "the local driver needs Linux (namespaces, overlayfs, cgroups); this is " + runtime.GOOS}
}

func (d *Driver) checkHost(context.Context, Config, Spec) error { return errUnavailable() }

func (d *Driver) create(context.Context, driversdk.CreateRequest, createPlan) ([]driversdk.VM, error) {
	return nil, errUnavailable()
}

func (d *Driver) destroy(context.Context, Config, string, []string) error { return errUnavailable() }

func (d *Driver) resize(context.Context, Config, string, []string, json.RawMessage) ([]driversdk.ResizeResult, error) {
	return nil, errUnavailable()
}

func (d *Driver) list(context.Context, Config, map[string]string) ([]driversdk.VM, error) {
	return nil, errUnavailable()
}
