package nubesfake

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/soulstack/soulstack/driversdk"
	"github.com/soulstack/soulstack/internal/localcloud"
)

// LocalMachines backs the fake's VMs with real local VMs
// (internal/localcloud): each boots the cloudInit userdata its create
// operation was given and trusts the userPublicKey, so that a keeper's
// whole flow (self-onboarding, seeds, packages) runs against the fake.
// The process must call localcloud.RunIfChild first thing (its TestMain,
// or main).
type LocalMachines struct {
	// Driver makes the VMs; Provider is the local provider they are made
	// with (its config's state_dir, host_ports, FQDN suffix); Profile is
	// the local VM spec (cpus, memory_mb, base_root, nesting).
	Driver   *localcloud.Driver
	Provider driversdk.Provider
	Profile  json.RawMessage
	// Timeout bounds one VM's create; 0: 5 minutes.
	Timeout time.Duration

	mu  sync.Mutex
	ids map[string]string // the fake instance's name: the local VM's id
}

var _ Machines = (*LocalMachines)(nil)

// Create boots a local VM named name with the create's userdata and key.
func (m *LocalMachines) Create(name string, params map[string]string) (Machine, error) {
	timeout := m.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req := driversdk.CreateRequest{Provider: m.Provider, RequestID: "nubesfake-" + strings.ReplaceAll(name, ".", "-"), RunID: "nubesfake",
		Profile: m.Profile, Count: 1, Names: []string{name}}
	if u := params["cloudInit"]; u != "" {
		req.Userdata = []string{u}
	}
	if k := strings.TrimSpace(params["userPublicKey"]); k != "" {
		req.AuthorizedKeys = []string{k}
	}
	vms, err := m.Driver.Create(ctx, req)
	if err != nil {
		return Machine{}, err
	}
	if len(vms) != 1 {
		return Machine{}, fmt.Errorf("the local driver made %d VMs for one", len(vms))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ids == nil {
		m.ids = map[string]string{}
	}
	m.ids[name] = vms[0].ID
	return Machine{Address: vms[0].PrimaryIP}, nil
}

// Destroy destroys the local VM of name, when there is one.
func (m *LocalMachines) Destroy(name string) error {
	m.mu.Lock()
	id := m.ids[name]
	delete(m.ids, name)
	m.mu.Unlock()
	if id == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return m.Driver.Destroy(ctx, driversdk.DestroyRequest{Provider: m.Provider, VMIDs: []string{id}})
}
