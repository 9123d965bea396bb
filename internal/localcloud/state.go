package localcloud

import (
	"bufio"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Layout of the state dir:
//
//	lock                 flock(2) held by every call that reads or changes state
//	host.json            the host network this state dir's VMs use (hostState)
//	destroyed            IDs of destroyed VMs, one a line (Destroy of one is a no-op)
//	vms/<id>/vm.json     one VM (vmRecord)
//	vms/<id>/upper/      its root overlay's upper layer (with a base_root), or its / (a view of the host)
//	vms/<id>/layers/<d>/ upper and work dirs of the view's overlay on /<d> (usr, etc, var…)
//	vms/<id>/work/       overlayfs's work dir (with a base_root)
//	vms/<id>/merged/     where its init mounts the root, in its own mount namespace only
//	vms/<id>/init.log    its init's log
const (
	lockFile      = "lock"
	hostFile      = "host.json"
	destroyedFile = "destroyed"
	vmsDir        = "vms"
	vmFile        = "vm.json"
)

// maxTombstones bounds the destroyed list; older IDs fall off it.
const maxTombstones = 10000

// hostState is the host-level setup shared by a state dir's VMs: created
// with the first VM, removed with the last.
type hostState struct {
	Subnet netip.Prefix `json:"subnet"`
	Bridge string       `json:"bridge"`
	Table  string       `json:"nft_table"`
	MTU    int          `json:"mtu"`
	// HostPorts are the TCP ports of the host VMs may reach (Config).
	HostPorts []uint16 `json:"host_ports"`
	// LoopbackPorts are those of HostPorts sent to 127.0.0.1 (Config).
	LoopbackPorts []uint16 `json:"loopback_ports,omitempty"`
}

// gateway is the bridge's address: the subnet's first one.
func (h hostState) gateway() netip.Addr {
	return h.Subnet.Addr().Next()
}

// vmRecord is what the driver remembers about one VM.
type vmRecord struct {
	ID        string            `json:"id"`
	Index     int               `json:"index"`
	FQDN      string            `json:"fqdn"`
	IP        netip.Addr        `json:"ip"`
	Spec      Spec              `json:"spec"`
	Tags      map[string]string `json:"tags"`
	CreatedAt time.Time         `json:"created_at"`
	// HostKey is the public half of the VM's sshd host key, in
	// authorized_keys format.
	HostKey string `json:"ssh_host_key"`
	// Cgroups are the VM's cgroup directories, one per hierarchy on
	// cgroup v1 hosts.
	Cgroups []string `json:"cgroups"`
	// PID is the VM's init in the host's PID namespace; PIDStart its
	// start time in clock ticks after boot, which tells it from a later
	// process that reuses the number.
	PID      int    `json:"pid,omitempty"`
	PIDStart uint64 `json:"pid_start,omitempty"`
}

// veth is the host end of the VM's network link, on the bridge. Names are
// at most 15 bytes.
func (v *vmRecord) veth() string {
	return "soulv" + strings.TrimPrefix(v.ID, "vm-")
}

// mac is the VM's eth0 address, derived from its IP so that it is the
// same every time the VM boots: a changing MAC leaves stale neighbour
// entries that stall connections for seconds.
func (v *vmRecord) mac() string {
	return macFor(v.IP)
}

func macFor(ip netip.Addr) string {
	b := ip.As4()
	return fmt.Sprintf("02:5e:%02x:%02x:%02x:%02x", b[0], b[1], b[2], b[3])
}

var vmIDRE = regexp.MustCompile(`^vm-[0-9a-f]{8}$`)

func newVMID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "vm-" + hex.EncodeToString(b[:])
}

// instanceID names a state dir's host-level objects (bridge, nft table)
// so that two drivers with different state dirs never share them.
func instanceID(stateDir string) string {
	sum := sha256.Sum256([]byte(stateDir))
	return hex.EncodeToString(sum[:4])
}

// Names derived from the instance ID. Every bridge this driver makes
// starts with bridgePrefix, which the nft rules match on.
const (
	bridgePrefix = "soulbr"
	tablePrefix  = "soulstack_local_"
)

// store reads and writes a state dir. Callers hold the state lock.
type store struct {
	dir string
}

func (s store) vmDir(id string) string { return filepath.Join(s.dir, vmsDir, id) }

func (s store) loadHost() (*hostState, error) {
	b, err := os.ReadFile(filepath.Join(s.dir, hostFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var h hostState
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("%s: %w", hostFile, err)
	}
	return &h, nil
}

func (s store) saveHost(h *hostState) error {
	return writeJSON(filepath.Join(s.dir, hostFile), h)
}

func (s store) removeHost() error {
	err := os.Remove(filepath.Join(s.dir, hostFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

func (s store) saveVM(v *vmRecord) error {
	if err := os.MkdirAll(s.vmDir(v.ID), 0o700); err != nil {
		return err
	}
	return writeJSON(filepath.Join(s.vmDir(v.ID), vmFile), v)
}

func (s store) loadVM(id string) (*vmRecord, error) {
	b, err := os.ReadFile(filepath.Join(s.vmDir(id), vmFile))
	if err != nil {
		return nil, err
	}
	var v vmRecord
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("%s: %w", id, err)
	}
	return &v, nil
}

// vms returns every VM in the state dir, by creation time then index. A
// VM dir without a readable record (a create that died before writing
// it) is reported with only its ID, so that it can still be destroyed.
func (s store) vms() ([]*vmRecord, error) {
	ents, err := os.ReadDir(filepath.Join(s.dir, vmsDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []*vmRecord
	for _, e := range ents {
		if !e.IsDir() || !vmIDRE.MatchString(e.Name()) {
			continue
		}
		v, err := s.loadVM(e.Name())
		if err != nil {
			v = &vmRecord{ID: e.Name()}
		}
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b *vmRecord) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		if a.Index != b.Index {
			return a.Index - b.Index
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

func (s store) destroyed(id string) (bool, error) {
	f, err := os.Open(filepath.Join(s.dir, destroyedFile))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if sc.Text() == id {
			return true, nil
		}
	}
	return false, sc.Err()
}

// addTombstones records ids as destroyed, keeping the newest
// maxTombstones.
func (s store) addTombstones(ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	p := filepath.Join(s.dir, destroyedFile)
	b, err := os.ReadFile(p)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	lines := strings.Fields(string(b))
	lines = append(lines, ids...)
	if len(lines) > maxTombstones {
		lines = lines[len(lines)-maxTombstones:]
	}
	return writeFileAtomic(p, []byte(strings.Join(lines, "\n")+"\n"), 0o600)
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(path, append(b, '\n'), 0o600)
}

// writeFileAtomic replaces path with data through a temporary file and a
// rename, so that a crash leaves the old or the new content.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}
