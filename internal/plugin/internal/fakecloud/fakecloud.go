// Package fakecloud is a FAKE cloud for tests: a driversdk.Driver that makes
// no VM anywhere and keeps the "VMs" it reports in the memory of its plugin
// process. It exists to test the PluginHost and the driver SDK through real
// plugin subprocesses (its main is soul-cloud-fake), and it misbehaves on
// request, through the provider's config:
//
//	{"crash": "Create"}     exit the process in the middle of Create
//	{"hang": "Create"}      ignore the deadline and never answer
//	{"slow": "Create"}      wait for the deadline, then give up properly
//	{"panic": "Create"}     panic in Create
//	{"fail": "Destroy"}     answer Destroy with a quota.exceeded error
//	{"chatter": 5000}       write that many log lines (JSON, plain text,
//	                        malformed, very long) to stderr on every call,
//	                        and some text to stdout
//	{"log_credentials": true}  log the provider's credentials in plain text,
//	                        as a careless driver might
//	{"private_only": true}  its VMs have a private address and no public one
//	{"api_key": "…"}        nothing but a secret-looking setting: its VMs'
//	                        attributes carry its SHA-256 (config_api_sha256),
//	                        so a test sees what the driver got
//
// The method names are those of driversdk.Driver. Its capabilities come from
// the SOULSTACK_FAKECLOUD_CAPS variable ("resize,list,idempotency" when
// unset; "none" for none). SOULSTACK_FAKECLOUD_BUGS turns it into a driver
// that breaks the contract, to show that the conformance suite notices: a
// comma-separated list of ignore-names, no-tags, accept-unknown-keys,
// destroy-unknown-ok, ignore-deadline, unchanged-downtime (a VM
// already at the spec is reported both unchanged and restarted),
// no-keeper-tag (VMs lack soulstack.keeper), destroy-unowned (Destroy
// ignores whose VM it is), bad-addresses (PublicIP missing from
// Addresses) and repeat-creates (a repeated request makes new VMs although
// the driver declares IdempotencyTokens).
//
// Its VMs have a public address in 203.0.113.0/24 (TEST-NET-3), which is
// their PrimaryIP, and a private one in 192.0.2.0/24 (TEST-NET-1) on the
// network "fake-net"; neither is ever routed. They carry the keeper's
// tags, soulstack.keeper among them, and Destroy and Resize refuse a VM
// whose soulstack.keeper is not the calling provider's KeeperID
// (driver.not_owned).
//
// Its VMs' attributes carry the SHA-256 of the credentials the call came
// with, so a test can see that they arrived, and the names of the
// environment variables the process was started with.
package fakecloud

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/soulstack/soulstack/driversdk"
)

// Config is the provider config the fake cloud understands.
type Config struct {
	Crash          string `json:"crash,omitempty"`
	Hang           string `json:"hang,omitempty"`
	Slow           string `json:"slow,omitempty"`
	Panic          string `json:"panic,omitempty"`
	Fail           string `json:"fail,omitempty"`
	Chatter        int    `json:"chatter,omitempty"`
	LogCredentials bool   `json:"log_credentials,omitempty"`
	APIKey         string `json:"api_key,omitempty"`
	PrivateOnly    bool   `json:"private_only,omitempty"`
}

// Spec is the profile (and resize) spec the fake cloud understands.
type Spec struct {
	CPUs     int `json:"cpus,omitempty"`
	MemoryMB int `json:"memory_mb,omitempty"`
}

// Driver is the fake cloud. The zero value is not usable; call New.
type Driver struct {
	caps driversdk.Capabilities
	bugs map[string]bool

	mu       sync.Mutex
	vms      map[string]*vm
	requests map[string][]string // request ID -> VM IDs, for idempotency
}

type vm struct {
	info      driversdk.VM
	destroyed bool
}

var _ driversdk.Driver = (*Driver)(nil)

// New returns an empty fake cloud with the capabilities that
// SOULSTACK_FAKECLOUD_CAPS names.
func New() *Driver {
	d := &Driver{vms: make(map[string]*vm), requests: make(map[string][]string), bugs: map[string]bool{}}
	for _, b := range strings.Split(os.Getenv("SOULSTACK_FAKECLOUD_BUGS"), ",") {
		d.bugs[b] = true
	}
	caps, ok := os.LookupEnv("SOULSTACK_FAKECLOUD_CAPS")
	if !ok {
		caps = "resize,list,idempotency"
	}
	for _, c := range strings.Split(caps, ",") {
		switch c {
		case "resize":
			d.caps.Resizable = true
		case "list":
			d.caps.Listable = true
		case "idempotency":
			d.caps.IdempotencyTokens = true
		}
	}
	return d
}

// Capabilities returns what SOULSTACK_FAKECLOUD_CAPS named.
func (d *Driver) Capabilities(context.Context) (driversdk.Capabilities, error) {
	return d.caps, nil
}

// config decodes the provider's config strictly.
func config(p driversdk.Provider) (Config, error) {
	var c Config
	if len(p.Config) == 0 {
		return c, nil
	}
	if err := strictDecode(p.Config, &c); err != nil {
		return c, driversdk.InvalidProfile("config"+fieldOf(err), err.Error())
	}
	return c, nil
}

// behave does what cfg asks of method: crash, hang, panic, chatter…
func behave(ctx context.Context, p driversdk.Provider, method string) error {
	cfg, err := config(p)
	if err != nil {
		return err
	}
	if cfg.LogCredentials {
		slog.InfoContext(ctx, "calling the fake cloud API", "method", method, "auth", string(p.Credentials))
	}
	if cfg.Chatter > 0 {
		chatter(cfg.Chatter)
	}
	switch method {
	case cfg.Crash:
		slog.ErrorContext(ctx, "crashing on purpose", "method", method)
		os.Exit(3)
	case cfg.Hang:
		slog.WarnContext(ctx, "hanging on purpose", "method", method)
		time.Sleep(time.Hour)
	case cfg.Slow:
		<-ctx.Done()
		return ctx.Err()
	case cfg.Panic:
		panic("fake cloud panics on purpose in " + method)
	case cfg.Fail:
		return &driversdk.Error{Code: "quota.exceeded", Message: "the fake cloud's quota is used up", Field: "count"}
	}
	return nil
}

// The process's original stderr, which the keeper reads, and stdout, which
// carried the handshake; os.Stderr and os.Stdout are pipes once Serve runs.
// Package variables: an *os.File that is garbage collected closes its fd.
var (
	fd2 = os.NewFile(2, "stderr")
	fd1 = os.NewFile(1, "stdout")
)

// chatter writes n log lines of every kind a plugin might write.
func chatter(n int) {
	long := strings.Repeat("x", 100<<10)
	for i := range n {
		switch i % 5 {
		case 0:
			slog.Info("chatter", "i", i, "detail", "a structured line")
		case 1:
			fmt.Fprintf(fd2, "plain text line %d on stderr\n", i)
		case 2:
			fmt.Fprintf(fd2, "{\"@message\": %d, \"@level\": 7, \"@timestamp\": false}\n", i)
		case 3:
			fmt.Fprintf(fd2, "{\"@message\": \"half a json line %d\n", i)
		case 4:
			fmt.Println("a driver bug: a line on os.Stdout", i)
		}
	}
	fmt.Fprintf(fd2, "a very long line: %s\n", long)
	fmt.Fprintf(fd1, "a driver bug: a line on the real stdout\n")
	fmt.Fprintf(os.Stderr, "a line on os.Stderr after the handshake\n")
}

// ValidateProfile accepts cpus and memory_mb, and a config of the keys
// in Config.
func (d *Driver) ValidateProfile(ctx context.Context, p driversdk.Provider, profile json.RawMessage) error {
	if err := behave(ctx, p, "ValidateProfile"); err != nil {
		return err
	}
	if d.bugs["accept-unknown-keys"] {
		return nil
	}
	_, err := spec(profile)
	return err
}

func spec(raw json.RawMessage) (Spec, error) {
	var s Spec
	if len(raw) == 0 {
		return s, nil
	}
	if err := strictDecode(raw, &s); err != nil {
		return s, driversdk.InvalidProfile(strings.TrimPrefix(fieldOf(err), "."), err.Error())
	}
	if s.CPUs < 0 || s.MemoryMB < 0 {
		return s, driversdk.InvalidProfile("cpus", "cpus and memory_mb must not be negative")
	}
	return s, nil
}

// strictDecode decodes a JSON object into v, refusing unknown keys.
func strictDecode(raw json.RawMessage, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// fieldOf finds the field an encoding/json error names: ".name".
func fieldOf(err error) string {
	msg := err.Error()
	if _, f, ok := strings.Cut(msg, "unknown field \""); ok {
		f, _, _ = strings.Cut(f, "\"")
		return "." + f
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return "." + te.Field
	}
	return ""
}

// Create makes count fake VMs, named as asked, tagged with the request's
// run and request IDs. With idempotency tokens on, a repeated request ID
// returns the VMs made the first time.
func (d *Driver) Create(ctx context.Context, req driversdk.CreateRequest) ([]driversdk.VM, error) {
	if err := behave(ctx, req.Provider, "Create"); err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok && d.bugs["ignore-deadline"] && time.Until(dl) < time.Second {
		time.Sleep(time.Minute)
	}
	s, err := spec(req.Profile)
	if err != nil {
		return nil, err
	}
	if req.Count < 1 {
		return nil, driversdk.InvalidProfile("count", "count must be at least 1")
	}
	if len(req.Names) != 0 && len(req.Names) != req.Count {
		return nil, driversdk.InvalidProfile("names", "names must have one name per VM")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if ids, ok := d.requests[req.RequestID]; ok && d.caps.IdempotencyTokens && req.RequestID != "" && !d.bugs["repeat-creates"] {
		out := make([]driversdk.VM, len(ids))
		for i, id := range ids {
			out[i] = d.vms[id].info
		}
		return out, nil
	}
	credsSum := sha256.Sum256(req.Provider.Credentials)
	suffix := req.Provider.FQDNSuffix
	if suffix == "" {
		suffix = "fake.test"
	}
	out := make([]driversdk.VM, req.Count)
	for i := range out {
		id := "fake-" + randomHex(6)
		fqdn := id + "." + suffix
		if len(req.Names) > 0 && !d.bugs["ignore-names"] {
			fqdn = req.Names[i]
		}
		attrs := map[string]any{
			"fake":               true,
			"cpus":               s.CPUs,
			"memory_mb":          s.MemoryMB,
			"credentials_sha256": hex.EncodeToString(credsSum[:]),
			"authorized_keys":    len(req.AuthorizedKeys),
			"env":                envNames(),
			"keeper_id":          req.Provider.KeeperID, // as the keeper sees it (tags do not reach the souls)
		}
		if c, _ := config(req.Provider); c.APIKey != "" {
			sum := sha256.Sum256([]byte(c.APIKey))
			attrs["config_api_sha256"] = hex.EncodeToString(sum[:])
		}
		if len(req.Userdata) > 0 {
			sum := sha256.Sum256([]byte(req.Userdata[i]))
			attrs["userdata_sha256"] = hex.EncodeToString(sum[:])
		}
		cfg, _ := config(req.Provider)
		n := 1 + len(d.vms)%250
		out[i] = driversdk.VM{
			ID:         id,
			FQDN:       fqdn,
			Attributes: attrs,
			Tags: map[string]string{
				driversdk.TagRunID: req.RunID, driversdk.TagRequestID: req.RequestID,
				driversdk.TagKeeper: req.Provider.KeeperID,
			},
		}
		setAddresses(&out[i], n, cfg.PrivateOnly, d.bugs["bad-addresses"])
		if d.bugs["no-keeper-tag"] {
			delete(out[i].Tags, driversdk.TagKeeper)
		}
		if d.bugs["no-tags"] {
			out[i].Tags = nil
		}
		d.vms[id] = &vm{info: out[i]}
		d.requests[req.RequestID] = append(d.requests[req.RequestID], id)
	}
	return out, nil
}

// setAddresses gives vm number n its addresses: a private one (TEST-NET-1)
// and, unless privateOnly, a public one (TEST-NET-3) that is its
// PrimaryIP. bad leaves the public address out of Addresses.
func setAddresses(vm *driversdk.VM, n int, privateOnly, bad bool) {
	vm.PrivateIP = fmt.Sprintf("192.0.2.%d", n)
	vm.PrimaryIP = vm.PrivateIP
	vm.Addresses = []driversdk.Address{{IP: vm.PrivateIP, Kind: driversdk.AddressPrivate, Network: "fake-net"}}
	if privateOnly {
		return
	}
	vm.PublicIP = fmt.Sprintf("203.0.113.%d", n)
	vm.PrimaryIP = vm.PublicIP
	if !bad {
		vm.Addresses = append(vm.Addresses, driversdk.Address{IP: vm.PublicIP, Kind: driversdk.AddressPublic})
	}
}

// owned refuses, with driver.not_owned, a VM that does not carry keeper's
// tag.
func (d *Driver) owned(v *vm, id, keeper string) error {
	if d.bugs["destroy-unowned"] || v.info.Tags[driversdk.TagKeeper] == keeper {
		return nil
	}
	return driversdk.Errorf(driversdk.CodeNotOwned, "the fake cloud's VM %q does not carry this keeper's tag %s", id, driversdk.TagKeeper)
}

// envNames returns the names of the process's environment variables.
func envNames() []string {
	var names []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		names = append(names, name)
	}
	return names
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Destroy forgets VMs. An ID it never made is vm.not_found (and nothing is
// destroyed); a VM already destroyed is fine.
func (d *Driver) Destroy(ctx context.Context, req driversdk.DestroyRequest) error {
	if err := behave(ctx, req.Provider, "Destroy"); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, id := range req.VMIDs {
		v, ok := d.vms[id]
		if !ok && !d.bugs["destroy-unknown-ok"] {
			return driversdk.Errorf(driversdk.CodeVMNotFound, "the fake cloud has no VM %q", id)
		}
		if ok && !v.destroyed {
			if err := d.owned(v, id, req.Provider.KeeperID); err != nil {
				return err
			}
		}
	}
	for _, id := range req.VMIDs {
		if v, ok := d.vms[id]; ok {
			v.destroyed = true
		}
	}
	return nil
}

// Resize sets the VMs' cpus and memory_mb; shrinking memory "needs" a
// restart (caused_downtime). A VM that already has both is left alone and
// reported unchanged.
func (d *Driver) Resize(ctx context.Context, req driversdk.ResizeRequest) ([]driversdk.ResizeResult, error) {
	if err := behave(ctx, req.Provider, "Resize"); err != nil {
		return nil, err
	}
	s, err := spec(req.Spec)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, id := range req.VMIDs { // refuse before touching any VM
		if v, ok := d.vms[id]; ok && !v.destroyed {
			if err := d.owned(v, id, req.Provider.KeeperID); err != nil {
				return nil, err
			}
		}
	}
	out := make([]driversdk.ResizeResult, len(req.VMIDs))
	for i, id := range req.VMIDs {
		v, ok := d.vms[id]
		if !ok || v.destroyed {
			return nil, driversdk.Errorf(driversdk.CodeVMNotFound, "the fake cloud has no VM %q", id)
		}
		oldCPUs, _ := v.info.Attributes["cpus"].(int)
		oldMem, _ := v.info.Attributes["memory_mb"].(int)
		if s.CPUs == oldCPUs && s.MemoryMB == oldMem {
			out[i] = driversdk.ResizeResult{VMID: id, Unchanged: true, CausedDowntime: d.bugs["unchanged-downtime"]}
			continue
		}
		v.info.Attributes["cpus"] = s.CPUs
		v.info.Attributes["memory_mb"] = s.MemoryMB
		out[i] = driversdk.ResizeResult{VMID: id, CausedDowntime: s.MemoryMB < oldMem}
	}
	return out, nil
}

// List returns the live VMs carrying every tag in req.Tags.
func (d *Driver) List(ctx context.Context, req driversdk.ListRequest) ([]driversdk.VM, error) {
	if err := behave(ctx, req.Provider, "List"); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []driversdk.VM
	for _, v := range d.vms {
		if v.destroyed || !hasTags(v.info.Tags, req.Tags) {
			continue
		}
		out = append(out, v.info)
	}
	return out, nil
}

func hasTags(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}
