package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/base"

	"github.com/soulstack/soulstack/driversdk"
	"github.com/soulstack/soulstack/driversdk/drivertest"
	"github.com/soulstack/soulstack/internal/drivers/openstack/openstackfake"
	"github.com/soulstack/soulstack/internal/plugin"
	"github.com/soulstack/soulstack/internal/testlog"
)

const (
	imageID    = "0b1e0a7e-4c3f-4c59-9a64-2f1d3c6e7a11"
	networkID  = "5d2c9e61-8f4a-4b1e-b6a9-3e7f0c2d1a55"
	extNetwork = "9f3a7b12-0c4d-4e8f-a1b2-c3d4e5f60718"
	canaryPW   = "canary-password-7f3e9c1d"
	canaryApp  = "canary-appcred-secret-2b8d"
)

func TestMain(m *testing.M) {
	drivertest.Main(m, "github.com/soulstack/soulstack/cmd/soul-cloud-openstack")
}

func binary(t *testing.T) string { return drivertest.Plugin(t, "openstack") }

func startFake(t *testing.T, o openstackfake.Options) *openstackfake.Fake {
	t.Helper()
	if o.Users == nil {
		o.Users = []openstackfake.User{{Name: "demo", Password: canaryPW, Project: "demo"}, {AppCredID: "ac-1", AppCredSecret: canaryApp, Project: "demo"}}
	}
	o.Flavors = []openstackfake.Flavor{{ID: "1", Name: "m1.small"}, {ID: "2", Name: "m1.medium"}}
	o.Images = []string{imageID}
	o.Networks = map[string]string{networkID: "private", extNetwork: "public"}
	f := openstackfake.Start(o)
	t.Cleanup(f.Close)
	return f
}

func provider(f *openstackfake.Fake, creds string) driversdk.Provider {
	cfg, _ := json.Marshal(map[string]string{"endpoint": f.URL})
	return driversdk.Provider{Name: "os", Region: "RegionOne", FQDNSuffix: "os.test", Config: cfg, Credentials: []byte(creds)}
}

func passwordCreds() string {
	return `{"auth_url": "http://127.0.0.1:1/unused", "username": "demo", "password": "` + canaryPW + `", "project_name": "demo", "user_domain_name": "Default", "project_domain_name": "Default"}`
}

const profile = `{"image": "` + imageID + `", "flavor": "m1.small", "network": "` + networkID + `", "ssh_user": "debian"}`

// host starts a PluginHost over a plugin dir holding the driver; its log
// goes to the returned buffer.
func host(t *testing.T) (*plugin.Host, *testlog.Buffer) {
	t.Helper()
	dir := t.TempDir()
	if err := os.Symlink(binary(t), filepath.Join(dir, "soul-cloud-openstack")); err != nil {
		t.Fatal(err)
	}
	buf := &testlog.Buffer{}
	h, err := plugin.New(plugin.Config{PluginDir: dir, Base: base.Base{Log: slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))},
		CreateTimeout: time.Minute, DestroyTimeout: time.Minute, ResizeTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h, buf
}

func driver(t *testing.T, h *plugin.Host) driversdk.Driver {
	t.Helper()
	d, err := h.Driver(context.Background(), "openstack")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func wantCode(t *testing.T, err error, code string) *driversdk.Error {
	t.Helper()
	var e *driversdk.Error
	if !errors.As(err, &e) || e.Code != code {
		t.Fatalf("error %v, want code %s", err, code)
	}
	return e
}

// TestConformance runs drivertest against the plugin and the fake, with
// slow builds and servers missing from their first GET.
func TestConformance(t *testing.T) {
	t.Parallel()
	f := startFake(t, openstackfake.Options{ActiveAfter: 300 * time.Millisecond, HideNew: 1})
	t.Cleanup(func() { // after the suite's own cleanup
		if n := len(f.Servers()); n != 0 {
			t.Errorf("the fake still has %d servers after the suite", n)
		}
	})
	drivertest.Run(t, drivertest.Options{
		Binary:      binary(t),
		Provider:    provider(f, passwordCreds()),
		Profile:     json.RawMessage(profile),
		ResizeSpec:  json.RawMessage(`{"flavor": "m1.medium"}`),
		UnknownVMID: "6f1d2c3b-0000-4000-8000-000000000000",
		Timeout:     time.Minute,
	})
}

// TestCrashSafeCreate kills the plugin while the cloud holds the answer
// to a create it accepted; a new plugin process given the same request
// returns that server and makes only the missing one.
func TestCrashSafeCreate(t *testing.T) {
	t.Parallel()
	f := startFake(t, openstackfake.Options{})
	h, _ := host(t)
	d := driver(t, h)
	prov := provider(f, passwordCreds())
	req := driversdk.CreateRequest{Provider: prov, RequestID: "req-crash", RunID: "run-crash", Profile: json.RawMessage(profile), Count: 2,
		Names: []string{"a.os.test", "b.os.test"}}

	f.HoldCreates()
	done := make(chan error, 1)
	go func() { _, err := d.Create(context.Background(), req); done <- err }()
	var held string
	select {
	case held = <-f.Accepted():
	case err := <-done:
		t.Fatalf("Create answered before the cloud held it: %v", err)
	}
	pid := h.PID("openstack")
	if pid == 0 {
		t.Fatal("no plugin process")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wantCode(t, <-done, driversdk.CodeDriverCrashed)
	f.Release()

	vms, err := d.Create(context.Background(), req)
	if err != nil {
		t.Fatalf("Create again after the crash: %v", err)
	}
	if now := h.PID("openstack"); now == pid || now == 0 {
		t.Fatalf("no new plugin process (pid %d, was %d)", now, pid)
	}
	if len(vms) != 2 || vms[0].ID != held || vms[1].ID == held {
		t.Fatalf("Create after the crash = %+v; want the held server %s first and one more", vms, held)
	}
	if got := len(f.Servers()); got != 2 || f.Creates() != 2 {
		t.Fatalf("the fake has %d servers after %d creates; want 2 and 2 (no duplicate)", got, f.Creates())
	}
	again, err := d.Create(context.Background(), req)
	if err != nil || len(again) != 2 || again[0].ID != vms[0].ID || again[1].ID != vms[1].ID || f.Creates() != 2 {
		t.Fatalf("a third Create = %+v, %v (creates %d); want the same servers", again, err, f.Creates())
	}
}

// TestOwnership: servers without this keeper's tag are neither deleted
// nor resized, and a call naming one touches none of the others.
func TestOwnership(t *testing.T) {
	t.Parallel()
	f := startFake(t, openstackfake.Options{})
	h, _ := host(t)
	d := driver(t, h)
	prov := provider(f, passwordCreds())
	ctx := context.Background()
	vms, err := d.Create(ctx, driversdk.CreateRequest{Provider: prov, RequestID: "req-own", RunID: "run-own", Profile: json.RawMessage(profile), Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	untagged := f.AddServer("someone-elses", map[string]string{"team": "db"})
	otherKeeper := f.AddServer("other-keeper", map[string]string{"soulstack:request_id": "r", "soulstack:run_id": "x", "soulstack:keeper": "another-deployment"})
	for _, foreign := range []string{untagged, otherKeeper} {
		err := d.Destroy(ctx, driversdk.DestroyRequest{Provider: prov, VMIDs: []string{vms[0].ID, foreign}})
		wantCode(t, err, "driver.not_owned")
		_, err = d.Resize(ctx, driversdk.ResizeRequest{Provider: prov, VMIDs: []string{vms[0].ID, foreign}, Spec: json.RawMessage(`{"flavor": "m1.medium"}`)})
		wantCode(t, err, "driver.not_owned")
	}
	live := f.Servers()
	if len(live) != 3 {
		t.Fatalf("the fake has %d servers after refused destroys, want all 3", len(live))
	}
	for _, s := range live {
		if s.Flavor != "1" {
			t.Errorf("server %s was resized to flavor %s by a refused call", s.Name, s.Flavor)
		}
	}
	listed, err := d.List(ctx, driversdk.ListRequest{Provider: prov})
	if err != nil || len(listed) != 1 || listed[0].ID != vms[0].ID {
		t.Fatalf("List = %+v, %v; want only this keeper's server", listed, err)
	}
	if err := d.Destroy(ctx, driversdk.DestroyRequest{Provider: prov, VMIDs: []string{vms[0].ID}}); err != nil {
		t.Fatal(err)
	}
}

// TestThrottling: the retryer rides out rate limits, and gives up with
// driver.unavailable when they outlast it.
func TestThrottling(t *testing.T) {
	t.Parallel()
	f := startFake(t, openstackfake.Options{})
	h, _ := host(t)
	d := driver(t, h)
	prov := provider(f, passwordCreds())
	ctx := context.Background()
	f.Throttle(4)
	vms, err := d.Create(ctx, driversdk.CreateRequest{Provider: prov, RequestID: "req-throttle", RunID: "run-t", Profile: json.RawMessage(profile), Count: 1})
	if err != nil || len(vms) != 1 {
		t.Fatalf("Create through 4 rate-limited answers: %v, %v", vms, err)
	}
	if n := f.Throttled(); n != 4 {
		t.Fatalf("the fake rate-limited %d requests, want 4", n)
	}
	if got := f.Creates(); got != 1 {
		t.Fatalf("%d creates, want 1", got)
	}
	// A 503 on GET is retried; a 503 on the create is not (the cloud may
	// have made the server), and the retry of the whole Create finds
	// nothing twice.
	f.Unavailable("GET", 3)
	if _, err := d.List(ctx, driversdk.ListRequest{Provider: prov}); err != nil || f.Served503() != 3 {
		t.Fatalf("List through 3 answers 503: %v (served %d)", err, f.Served503())
	}
	f.Unavailable("POST", 1)
	_, err = d.Create(ctx, driversdk.CreateRequest{Provider: prov, RequestID: "req-503", RunID: "run-t", Profile: json.RawMessage(profile), Count: 1})
	wantCode(t, err, driversdk.CodeDriverUnavailable)
	if f.Served503() != 4 || f.Creates() != 1 {
		t.Fatalf("a create answered 503 was sent again (503s %d, creates %d)", f.Served503(), f.Creates())
	}
	f.Throttle(1000)
	_, err = d.List(ctx, driversdk.ListRequest{Provider: prov})
	wantCode(t, err, driversdk.CodeDriverUnavailable)
	if n := f.Throttled() - 4; n < 2 || n > 10 {
		t.Fatalf("the retryer sent %d requests into the rate limit; want a bounded few", n)
	}
	f.Throttle(0)
}

// TestQuotaPartialFailure: the 4th of 5 creates fails with the quota;
// the three made are deleted and the error is quota.exceeded.
func TestQuotaPartialFailure(t *testing.T) {
	t.Parallel()
	f := startFake(t, openstackfake.Options{Quota: 3, ActiveAfter: 100 * time.Millisecond})
	h, _ := host(t)
	d := driver(t, h)
	prov := provider(f, passwordCreds())
	_, err := d.Create(context.Background(), driversdk.CreateRequest{Provider: prov, RequestID: "req-quota", RunID: "run-q", Profile: json.RawMessage(profile), Count: 5})
	e := wantCode(t, err, "quota.exceeded")
	if !strings.Contains(e.Message, "Quota exceeded for instances") {
		t.Errorf("message %q lacks the cloud's explanation", e.Message)
	}
	if f.Creates() != 3 || len(f.Servers()) != 0 {
		t.Fatalf("after the failure: %d creates, %d servers left; want 3 made and none left", f.Creates(), len(f.Servers()))
	}
	f.FailBuild(true)
	f.SetQuota(0)
	_, err = d.Create(context.Background(), driversdk.CreateRequest{Provider: prov, RequestID: "req-error", RunID: "run-q", Profile: json.RawMessage(profile), Count: 2})
	wantCode(t, err, "vm.failed")
	if len(f.Servers()) != 0 {
		t.Fatalf("servers in ERROR left behind: %+v", f.Servers())
	}
}

// TestCredentials: bad credentials are auth.failed; application
// credentials work; no credential reaches an error or the plugin's log.
func TestCredentials(t *testing.T) {
	t.Parallel()
	f := startFake(t, openstackfake.Options{})
	h, logs := host(t)
	d := driver(t, h)
	ctx := context.Background()
	var errs []error

	wrong := `{"username": "demo", "password": "` + canaryPW + `-wrong", "project_name": "demo", "user_domain_name": "Default"}`
	_, err := d.List(ctx, driversdk.ListRequest{Provider: provider(f, wrong)})
	wantCode(t, err, "auth.failed")
	errs = append(errs, err)

	appCred := `{"auth": {"auth_url": "` + f.URL + `", "application_credential_id": "ac-1", "application_credential_secret": "` + canaryApp + `"}, "region_name": "RegionOne"}`
	prov := provider(f, appCred)
	prov.Config = json.RawMessage(`{}`) // auth_url from the credentials
	vms, err := d.Create(ctx, driversdk.CreateRequest{Provider: prov, RequestID: "req-cred", RunID: "run-c", Profile: json.RawMessage(profile), Count: 1})
	if err != nil || len(vms) != 1 {
		t.Fatalf("Create with an application credential: %v, %v", vms, err)
	}
	for _, bad := range []string{
		`{"username": "demo", "password": "` + canaryPW + `", "extra_secret_key": "` + canaryApp + `"}`,
		`{"username": "demo", "password": "` + canaryPW + `"`,
		`{"username": 7, "password": "` + canaryPW + `"}`,
		`{"application_credential_secret": "` + canaryApp + `"}`,
	} {
		_, err := d.List(ctx, driversdk.ListRequest{Provider: provider(f, bad)})
		wantCode(t, err, "auth.failed")
		errs = append(errs, err)
	}
	_, err = d.Create(ctx, driversdk.CreateRequest{Provider: provider(f, passwordCreds()), RequestID: "req-bad-image", RunID: "run-c", Count: 1,
		Profile: json.RawMessage(`{"image": "no-such-image", "flavor": "m1.small", "network": "` + networkID + `"}`)})
	wantCode(t, err, driversdk.CodeProfileInvalid)
	errs = append(errs, err)
	if err := d.Destroy(ctx, driversdk.DestroyRequest{Provider: prov, VMIDs: []string{vms[0].ID}}); err != nil {
		t.Fatal(err)
	}
	for _, canary := range []string{canaryPW, canaryApp} {
		if strings.Contains(logs.String(), canary) {
			t.Errorf("the plugin's log holds the credential %q:\n%s", canary, logs.String())
		}
		for _, err := range errs {
			if strings.Contains(err.Error(), canary) {
				t.Errorf("error %q holds the credential", err)
			}
		}
	}
}

// TestFloatingIP: a profile with floating_network gives the VM a floating
// IP as its primary address, and Destroy releases it.
func TestFloatingIP(t *testing.T) {
	t.Parallel()
	f := startFake(t, openstackfake.Options{})
	h, _ := host(t)
	d := driver(t, h)
	prov := provider(f, passwordCreds())
	ctx := context.Background()
	prof := `{"image": "` + imageID + `", "flavor": "2", "network": "` + networkID + `", "floating_network": "` + extNetwork + `",
		"security_groups": ["default"], "key_name": "ops", "volume_size_gb": 20, "zone": "nova", "labels": {"team": "web"}}`
	vms, err := d.Create(ctx, driversdk.CreateRequest{Provider: prov, RequestID: "req-fip", RunID: "run-f", Profile: json.RawMessage(prof), Count: 1,
		Userdata: []string{"#!/bin/sh\necho hello\n"}, AuthorizedKeys: []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeeperKey keeper"}})
	if err != nil || len(vms) != 1 {
		t.Fatalf("Create: %v, %v", vms, err)
	}
	if !strings.HasPrefix(vms[0].PrimaryIP, "203.0.113.") {
		t.Fatalf("primary IP %q, want the floating IP", vms[0].PrimaryIP)
	}
	s := f.Servers()[0]
	ud, _ := base64.StdEncoding.DecodeString(s.UserData)
	if !strings.Contains(string(ud), "AAAAIFakeKeeperKey") || !strings.Contains(string(ud), "echo hello") {
		t.Errorf("the server's user_data lacks the keeper's key or the step's script:\n%s", ud)
	}
	if s.Metadata["team"] != "web" || s.KeyName != "ops" || s.VolumeSizeGB != 20 || s.Flavor != "2" || s.Zone != "nova" {
		t.Errorf("the server was not made as the profile says: %+v", s)
	}
	if err := d.Destroy(ctx, driversdk.DestroyRequest{Provider: prov, VMIDs: []string{vms[0].ID}}); err != nil {
		t.Fatal(err)
	}
	if n := f.FloatingIPs(); n != 0 {
		t.Fatalf("%d floating IPs left after Destroy", n)
	}
}

// TestValidateProfile: strict profiles and config, the bad key named.
func TestValidateProfile(t *testing.T) {
	t.Parallel()
	h, _ := host(t)
	d := driver(t, h)
	ok := driversdk.Provider{Name: "os", Config: json.RawMessage(`{"endpoint": "https://keystone.example.com/v3"}`)}
	for _, tc := range []struct {
		name, config, profile, field string
	}{
		{"unknown key", `{}`, `{"image": "i", "flavor": "f", "network": "n", "flavour": "x"}`, "flavour"},
		{"no image", `{}`, `{"flavor": "f", "network": "n"}`, "image"},
		{"no network", `{}`, `{"image": "i", "flavor": "f"}`, "network"},
		{"wrong type", `{}`, `{"image": "i", "flavor": "f", "network": "n", "volume_size_gb": "20"}`, "volume_size_gb"},
		{"negative volume", `{}`, `{"image": "i", "flavor": "f", "network": "n", "volume_size_gb": -1}`, "volume_size_gb"},
		{"reserved label", `{}`, `{"image": "i", "flavor": "f", "network": "n", "labels": {"soulstack:keeper": "x"}}`, "labels.soulstack:keeper"},
		{"bad address", `{}`, `{"image": "i", "flavor": "f", "network": "n", "address": "both"}`, "address"},
		{"unknown config key", `{"endpoint": "https://k/v3", "regoin": "x"}`, `{"image": "i", "flavor": "f", "network": "n"}`, "config.regoin"},
		{"bad endpoint", `{"endpoint": "keystone"}`, `{"image": "i", "flavor": "f", "network": "n"}`, "config.endpoint"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := ok
			p.Config = json.RawMessage(tc.config)
			err := d.ValidateProfile(context.Background(), p, json.RawMessage(tc.profile))
			e := wantCode(t, err, driversdk.CodeProfileInvalid)
			if e.Field != tc.field {
				t.Fatalf("Field %q, want %q (%v)", e.Field, tc.field, err)
			}
		})
	}
	if err := d.ValidateProfile(context.Background(), ok, json.RawMessage(profile)); err != nil {
		t.Fatalf("a good profile: %v", err)
	}
}

// TestResize: Nova's resize and confirm give each server the new flavor
// with caused_downtime; servers on it already are unchanged and not
// touched.
func TestResize(t *testing.T) {
	t.Parallel()
	f := startFake(t, openstackfake.Options{ActiveAfter: 100 * time.Millisecond})
	h, _ := host(t)
	d := driver(t, h)
	prov := provider(f, passwordCreds())
	ctx := context.Background()
	vms, err := d.Create(ctx, driversdk.CreateRequest{Provider: prov, RequestID: "req-resize", RunID: "run-r", Profile: json.RawMessage(profile), Count: 2})
	if err != nil {
		t.Fatal(err)
	}
	spec := json.RawMessage(`{"flavor": "m1.medium"}`)
	res, err := d.Resize(ctx, driversdk.ResizeRequest{Provider: prov, VMIDs: []string{vms[0].ID}, Spec: spec})
	if err != nil || len(res) != 1 || !res[0].CausedDowntime || res[0].Unchanged || res[0].VMID != vms[0].ID {
		t.Fatalf("Resize of one server = %+v, %v; want it resized with downtime", res, err)
	}
	res, err = d.Resize(ctx, driversdk.ResizeRequest{Provider: prov, VMIDs: []string{vms[0].ID, vms[1].ID}, Spec: spec})
	if err != nil || len(res) != 2 || !res[0].Unchanged || res[0].CausedDowntime || !res[1].CausedDowntime {
		t.Fatalf("Resize of both = %+v, %v; want the first unchanged, the second resized", res, err)
	}
	for _, s := range f.Servers() {
		if s.Flavor != "2" || s.Status != "ACTIVE" {
			t.Errorf("server %s: flavor %s, status %s; want m1.medium (2), ACTIVE", s.Name, s.Flavor, s.Status)
		}
	}
	_, err = d.Resize(ctx, driversdk.ResizeRequest{Provider: prov, VMIDs: []string{vms[0].ID}, Spec: json.RawMessage(`{"flavor": "m1.medium", "cpus": 2}`)})
	if e := wantCode(t, err, driversdk.CodeProfileInvalid); e.Field != "cpus" {
		t.Fatalf("a resize spec with an unknown key: field %q", e.Field)
	}
	if err := d.Destroy(ctx, driversdk.DestroyRequest{Provider: prov, VMIDs: ids(vms)}); err != nil {
		t.Fatal(err)
	}
}

func ids(vms []driversdk.VM) []string {
	out := make([]string, len(vms))
	for i, vm := range vms {
		out[i] = vm.ID
	}
	return out
}
