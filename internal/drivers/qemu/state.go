package qemu

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/soulstack/soulstack/internal/localcloud"
)

// The state dir:
//
//	state.lock           serializes changes to the records (flock)
//	host.json            the host network (the local driver's record of it)
//	vms/<id>/vm.json     one VM (vmRecord)
//	vms/<id>/disk.qcow2  its copy-on-write overlay on the image
//	vms/<id>/seed.iso    its NoCloud seed
//	vms/<id>/qmp.sock    its QEMU's QMP socket
//	vms/<id>/qemu.pid    its QEMU's pid
//	destroyed            IDs of destroyed VMs, one per line (bounded)
//	images/              the images the driver builds (debian-bookworm),
//	                     and accel.json, the KVM probe's answer for this
//	                     boot of the host (unless images_dir is elsewhere)
const (
	vmsDir        = "vms"
	maxTombstones = 10000
)

// vmRecord is what the driver remembers of one VM.
type vmRecord struct {
	ID    string     `json:"id"`
	Index int        `json:"index"`
	FQDN  string     `json:"fqdn"`
	IP    netip.Addr `json:"ip"`
	MAC   string     `json:"mac"`
	Tap   string     `json:"tap"`
	Spec  Spec       `json:"spec"`
	Accel string     `json:"accel"`
	// Image is what the VM's disk is made on and how it boots.
	Image     image             `json:"image"`
	Tags      map[string]string `json:"tags"`
	CreatedAt time.Time         `json:"created_at"`
	// HostKey is the public half of the sshd host key the driver made
	// for the VM (cloud-init installs it), in authorized_keys format.
	HostKey string `json:"ssh_host_key"`
	PID     int    `json:"pid,omitempty"`
}

var vmIDRE = regexp.MustCompile(`^vm-[0-9a-f]{8}$`)

func newVMID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "vm-" + hex.EncodeToString(b[:])
}

// tapName is the host end of a VM's NIC (at most 15 bytes).
func tapName(id string) string { return "soulq" + strings.TrimPrefix(id, "vm-") }

type store struct{ dir string }

func (s store) vmDir(id string) string { return filepath.Join(s.dir, vmsDir, id) }

func (s store) saveVM(v *vmRecord) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return localcloud.WriteFileAtomic(filepath.Join(s.vmDir(v.ID), "vm.json"), append(b, '\n'))
}

func (s store) loadVM(id string) (*vmRecord, error) {
	b, err := os.ReadFile(filepath.Join(s.vmDir(id), "vm.json"))
	if err != nil {
		return nil, err
	}
	var v vmRecord
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// vms returns every recorded VM, ordered by creation.
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
		if !vmIDRE.MatchString(e.Name()) {
			continue
		}
		v, err := s.loadVM(e.Name())
		if errors.Is(err, fs.ErrNotExist) {
			// A create that died before its first record, or a destroy
			// before it removed the dir: reported by its ID alone, so that
			// it can still be listed and destroyed.
			v, err = s.partial(e.Name())
		}
		if err != nil {
			return nil, err
		}
		if v != nil {
			out = append(out, v)
		}
	}
	slices.SortFunc(out, func(a, b *vmRecord) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out, nil
}

// partial is the record of a VM dir without a vm.json: nil when the
// dir is gone too or the VM was destroyed (its dir on the way out).
func (s store) partial(id string) (*vmRecord, error) {
	if fi, err := os.Stat(s.vmDir(id)); err != nil || !fi.IsDir() || s.destroyed(id) {
		return nil, nil
	}
	return &vmRecord{ID: id, Tap: tapName(id)}, nil
}

func (s store) destroyed(id string) bool {
	b, err := os.ReadFile(filepath.Join(s.dir, "destroyed"))
	if err != nil {
		return false
	}
	return slices.Contains(strings.Split(string(b), "\n"), id)
}

func (s store) addTombstone(id string) error {
	p := filepath.Join(s.dir, "destroyed")
	b, _ := os.ReadFile(p)
	lines := strings.Fields(string(b))
	if slices.Contains(lines, id) {
		return nil
	}
	lines = append(lines, id)
	if len(lines) > maxTombstones {
		lines = lines[len(lines)-maxTombstones:]
	}
	return localcloud.WriteFileAtomic(p, []byte(strings.Join(lines, "\n")+"\n"))
}

// lockVM takes the lock of one VM (its dir's lock file), held while the
// VM is resized or destroyed; a VM whose record is gone is
// os.ErrNotExist.
func (s store) lockVM(ctx context.Context, id string) (func(), error) {
	dir := s.vmDir(id)
	if _, err := os.Stat(filepath.Join(dir, "vm.json")); err != nil {
		return nil, err
	}
	unlock, err := localcloud.Flock(ctx, filepath.Join(dir, "lock"))
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(dir, "vm.json")); err != nil {
		// Destroyed while this waited: the lock made the dir again.
		unlock()
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return unlock, nil
}
