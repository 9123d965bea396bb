package cloud

import (
	"encoding/json"
	"fmt"

	"github.com/soulstack/soulstack/driversdk"
	"github.com/soulstack/soulstack/internal/module"
)

// The values of the address setting (provider config or profile spec):
// which of a VM's addresses becomes its soul's address.
const (
	AddressPublic  = driversdk.AddressPublic
	AddressPrivate = driversdk.AddressPrivate
)

// addressSetting reads the address setting of a create: the profile's
// when it has one, else the provider config's, else "" (public when the
// VM has one, else private). It returns the profile without the key, as
// the driver gets it (the keeper reads the setting; drivers never see it).
// A value other than public or private is cloud.address_invalid naming
// where it was.
func addressSetting(provider string, config, profile json.RawMessage) (string, json.RawMessage, error) {
	fromConfig, _, err := takeAddress(config, fmt.Sprintf("provider %q config", provider))
	if err != nil {
		return "", profile, err
	}
	fromProfile, profile, err := takeAddress(profile, "profile")
	if err != nil {
		return "", profile, err
	}
	if fromProfile != "" {
		return fromProfile, profile, nil
	}
	return fromConfig, profile, nil
}

// takeAddress returns the address key of the JSON object raw and raw
// without it. raw that is not an object is returned as it is (the driver
// reports it).
func takeAddress(raw json.RawMessage, where string) (string, json.RawMessage, error) {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil || m == nil {
		return "", raw, nil
	}
	v, ok := m["address"]
	if !ok {
		return "", raw, nil
	}
	var s string
	if json.Unmarshal(v, &s) != nil || (s != AddressPublic && s != AddressPrivate) {
		return "", raw, &module.Error{Code: "cloud.address_invalid",
			Message: fmt.Sprintf("%s: address must be %q or %q, not %s", where, AddressPublic, AddressPrivate, string(v))}
	}
	delete(m, "address")
	b, err := json.Marshal(m)
	if err != nil {
		return "", raw, err
	}
	return s, b, nil
}

// chooseAddress returns the address of vm that its soul is reached at:
// with mode public its PublicIP, with private its PrivateIP, and with no
// mode the public one when it has one, else the private one. A driver
// that reports neither (PrimaryIP only) gets its PrimaryIP when no mode is
// set. A VM without the address mode asks for is cloud.address_missing.
func chooseAddress(mode string, vm driversdk.VM) (string, error) {
	switch mode {
	case AddressPublic:
		if vm.PublicIP != "" {
			return vm.PublicIP, nil
		}
	case AddressPrivate:
		if vm.PrivateIP != "" {
			return vm.PrivateIP, nil
		}
	default:
		for _, ip := range []string{vm.PublicIP, vm.PrivateIP, vm.PrimaryIP} {
			if ip != "" {
				return ip, nil
			}
		}
		return "", &module.Error{Code: "cloud.address_missing", Message: fmt.Sprintf("VM %s has no address", vm.ID)}
	}
	return "", &module.Error{Code: "cloud.address_missing", Message: fmt.Sprintf("VM %s has no %s address (address: %s)", vm.ID, mode, mode)}
}

// addressesOut is the addresses output of one VM.
func addressesOut(vm driversdk.VM) []any {
	out := make([]any, 0, len(vm.Addresses))
	for _, a := range vm.Addresses {
		m := map[string]any{"ip": a.IP, "kind": a.Kind}
		if a.Network != "" {
			m["network"] = a.Network
		}
		out = append(out, m)
	}
	return out
}
