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
// operation was given and trusts the userPublicKey for the userLogin
// (root when it has none), so that a keeper's
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

// NewLocalMachines makes local VMs of 1 CPU and 1 GB kept in state.
// hostPorts are the TCP ports on the host's loopback the VMs reach at
// their gateway (a keeper's API, agent listener and bus on 127.0.0.1);
// docker lets them run a container engine (the local driver's nesting,
// whose root can reach the host).
func NewLocalMachines(state string, hostPorts []uint16, docker bool) *LocalMachines {
	cfg := map[string]any{"state_dir": state}
	spec := map[string]any{"cpus": 1, "memory_mb": 1024}
	if docker {
		cfg["allow_nesting"] = true
		spec["nesting"] = "docker"
	}
	rawCfg, _ := json.Marshal(cfg)
	rawSpec, _ := json.Marshal(spec)
	return &LocalMachines{Driver: localcloud.New(localcloud.Options{HostPorts: hostPorts}),
		Provider: driversdk.Provider{Name: "nubes-fake", FQDNSuffix: "nubes.test", Config: rawCfg, KeeperID: "nubes-fake"},
		Profile:  rawSpec}
}

// Create boots a local VM named name with the create's userdata and key.
func (m *LocalMachines) Create(name string, params map[string]string) (Machine, error) {
	timeout := m.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	spec := map[string]any{}
	if len(m.Profile) > 0 {
		if err := json.Unmarshal(m.Profile, &spec); err != nil {
			return Machine{}, fmt.Errorf("the local profile: %w", err)
		}
	}
	// The key is given to the create's user login, as the cloud does.
	if u := params["userLogin"]; u != "" {
		spec["ssh_user"] = u
	}
	profile, _ := json.Marshal(spec)
	req := driversdk.CreateRequest{Provider: m.Provider, RequestID: "nubesfake-" + strings.ReplaceAll(name, ".", "-"), RunID: "nubesfake",
		Profile: profile, Count: 1, Names: []string{name}}
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

// DestroyAll destroys every local VM of m's provider: the ones the fake
// made and any a crash of it left behind in the state dir.
func (m *LocalMachines) DestroyAll(ctx context.Context) error {
	vms, err := m.Driver.List(ctx, driversdk.ListRequest{Provider: m.Provider})
	if err != nil {
		return fmt.Errorf("list the local VMs: %w", err)
	}
	var ids []string
	for _, vm := range vms {
		ids = append(ids, vm.ID)
	}
	m.mu.Lock()
	m.ids = nil
	m.mu.Unlock()
	if len(ids) == 0 {
		return nil
	}
	if err := m.Driver.Destroy(ctx, driversdk.DestroyRequest{Provider: m.Provider, VMIDs: ids}); err != nil {
		return fmt.Errorf("destroy the local VMs: %w", err)
	}
	return nil
}
