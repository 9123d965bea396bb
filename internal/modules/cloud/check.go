package cloud

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/module"
	"github.com/soulstack/soulstack/internal/store"
)

// The cloud states' check paths never call a driver's Create, Destroy or
// Resize: they read the registry and ask the driver only what is
// read-only (ValidateProfile, Capabilities, List).

var (
	_ module.Checker = (*Created)(nil)
	_ module.Checker = (*Destroyed)(nil)
	_ module.Checker = (*Resized)(nil)
)

// Check says what the create would make: count VMs of the profile (each
// named, for a self_onboard batch), after the checks the create makes
// before it calls the driver (provider, count, profile, names, seeds).
// A create always changes; its output (the new hosts) exists only after
// it.
func (m *Created) Check(ctx context.Context, run module.RunInfo, raw json.RawMessage, _ module.Target) (module.Prediction, error) {
	var p CreatedParams
	if err := module.DecodeParams(raw, &p); err != nil {
		return module.Prediction{}, err
	}
	h := m.svc
	if h == nil {
		return module.Prediction{}, errUnprovisioned
	}
	c, err := p.prepare(ctx, h, run)
	if err != nil {
		return module.Prediction{}, err
	}
	if err := checkSeeds(h, p.Seeds, c.sampleSID(p.Name)); err != nil {
		return module.Prediction{}, err
	}
	profile := profileName(p.Profile)
	var changes []client.Change
	if len(c.names) > 0 {
		for _, sid := range c.names {
			changes = append(changes, client.Change{Kind: "vm", Action: "create", Name: sid, After: profile})
		}
	} else {
		changes = []client.Change{{Kind: "vm", Action: "create", Name: fmt.Sprintf("%d VM(s) at provider %s", p.Count, c.prov.Name), After: profile}}
	}
	return module.Prediction{WouldChange: true, Changes: changes}, nil
}

// profileName is how a plan names the profile param: its name, or
// "inline spec".
func profileName(v any) string {
	if s, ok := v.(string); ok {
		return "profile " + s
	}
	return "an inline spec"
}

// Check says which VMs the destroy would destroy (those the driver still
// lists) and which souls it would mark destroyed, after the pairing
// checks the destroy makes first.
func (m *Destroyed) Check(ctx context.Context, run module.RunInfo, raw json.RawMessage, _ module.Target) (module.Prediction, error) {
	var p DestroyedParams
	if err := module.DecodeParams(raw, &p); err != nil {
		return module.Prediction{}, err
	}
	h := m.svc
	if h == nil {
		return module.Prediction{}, errUnprovisioned
	}
	prov, d, dp, err := provider(ctx, h, run, p.Provider)
	if err != nil {
		return module.Prediction{}, err
	}
	if err := checkPairing(ctx, h.Registry, run, prov.Name, p.VMIDs, p.SIDs); err != nil {
		return module.Prediction{}, err
	}
	live, _, err := liveVMs(ctx, d, dp, p.VMIDs)
	if err != nil {
		return module.Prediction{}, err
	}
	var changes []client.Change
	for _, id := range live {
		changes = append(changes, client.Change{Kind: "vm", Action: "destroy", Name: id})
	}
	for _, sid := range p.SIDs {
		so, err := h.Registry.SoulGet(ctx, sid)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return module.Prediction{}, err
		}
		if so.Status != store.SoulDestroyed {
			changes = append(changes, client.Change{Kind: "soul", Action: "delete", Name: sid, Before: so.Status, After: store.SoulDestroyed})
		}
	}
	return module.Prediction{WouldChange: len(changes) > 0, Changes: changes}, nil
}

// Check says which VMs the resize would ask the driver to resize, after
// the checks the resize makes first. Whether a VM already has the size is
// the driver's to say when it resizes (the driver API has no read-only
// question for it), so the check is unknown unless there is nothing to
// resize.
func (m *Resized) Check(ctx context.Context, run module.RunInfo, raw json.RawMessage, _ module.Target) (module.Prediction, error) {
	var p ResizedParams
	if err := module.DecodeParams(raw, &p); err != nil {
		return module.Prediction{}, err
	}
	h := m.svc
	if h == nil {
		return module.Prediction{}, errUnprovisioned
	}
	if _, err := p.prepare(ctx, h, run); err != nil {
		return module.Prediction{}, err
	}
	if len(p.VMIDs) == 0 {
		return module.Prediction{}, nil
	}
	var changes []client.Change
	for _, id := range p.VMIDs {
		changes = append(changes, client.Change{Kind: "vm", Action: "resize", Name: id, After: profileName(p.Profile)})
	}
	return module.Prediction{Changes: changes, Unknown: "whether " + strings.Join(p.VMIDs, ", ") + " already have this size is known to the driver only when it resizes"}, nil
}
