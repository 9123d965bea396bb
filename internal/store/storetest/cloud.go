package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/testdb"
)

func cloudSouls() ([]store.Soul, []store.BootstrapToken) {
	var souls []store.Soul
	var tokens []store.BootstrapToken
	for i, sid := range []string{"vm-1.local.test", "vm-2.local.test"} {
		souls = append(souls, store.Soul{SID: sid, Provider: "local", VMID: "vm-" + sid[3:4], Address: "10.213.0.1" + sid[3:4], PrimaryIP: "10.213.0.1" + sid[3:4], Connection: store.Connection{Transport: "ssh", User: "root", Port: 22}})
		tokens = append(tokens, store.BootstrapToken{ID: "bt_" + sid, SID: sid, Hash: "hash-" + string(rune('a'+i)), ExpiresAt: time.Now().Add(time.Hour)})
	}
	return souls, tokens
}

func testCloudProvisionAndDestroy(t *testing.T, b testdb.Backend) {
	s := b.Open(t)
	mustProvider(t, s, "local")
	if err := s.CloudRequestCreate(ctx, store.CloudRequest{RequestID: "req_1", RunID: "run_1", Step: "provision", Provider: "local", Count: 2}); err != nil {
		t.Fatal(err)
	}
	souls, tokens := cloudSouls()
	if err := s.CloudProvision(ctx, store.CloudProvisionParams{RequestID: "req_1", Souls: souls, Tokens: tokens, Actor: "tok_creator", Audit: map[string]any{"provider": "local"}}); err != nil {
		t.Fatal(err)
	}
	so, err := s.SoulGet(ctx, "vm-1.local.test")
	if err != nil || so.Status != store.SoulPending || so.CreatedByAID != nil || so.VMID != "vm-1" || so.Provider != "local" {
		t.Fatalf("cloud soul = %+v, %v", so, err)
	}
	req, err := s.CloudRequestGet(ctx, "req_1")
	if err != nil || req.Status != "created" || len(req.VMIDs) != 2 || req.FinishedAt == nil {
		t.Fatalf("request = %+v, %v", req, err)
	}
	if _, err := s.DB().Exec(`INSERT INTO soul_seeds (sid, scenario, input, status) VALUES ('vm-1.local.test', 'x', '{}', 'active')`); err != nil {
		t.Fatal(err)
	}
	owned, err := s.CloudVMsCreated(ctx, "local", []string{"vm-1", "vm-2", "vm-9"})
	if err != nil || len(owned) != 2 || owned["vm-1"] != store.DefaultProject || owned["vm-2"] != store.DefaultProject {
		t.Fatalf("created VMs of local = %v, %v", owned, err)
	}
	if owned, err := s.CloudVMsCreated(ctx, "other", []string{"vm-1"}); err != nil || len(owned) != 0 {
		t.Fatalf("created VMs of another provider = %v, %v", owned, err)
	}
	// The VMs were already gone at the provider; the rows still move, so
	// the event says changed.
	c, err := s.CloudDestroy(ctx, store.CloudDestroyParams{Provider: "local", VMIDs: []string{"vm-1", "vm-2"}, SIDs: []string{"vm-1.local.test", "vm-2.local.test"},
		AlreadyGone: []string{"vm-1", "vm-2"}, Actor: "tok_creator"})
	if err != nil || c != (store.CloudCascade{SoulsDestroyed: 2, SeedsOrphaned: 1, TokensBurned: 2}) {
		t.Fatalf("cascade = %+v, %v", c, err)
	}
	toks, _ := s.BootstrapTokens(ctx, "vm-2.local.test")
	if len(toks) != 1 || toks[0].Status != store.BootstrapBurned {
		t.Fatalf("tokens = %+v", toks)
	}
	souls2, _ := s.SoulsOfProvider(ctx, "local")
	if len(souls2) != 2 || souls2[0].Status != store.SoulDestroyed {
		t.Fatalf("souls = %+v", souls2)
	}
	// A second destroy changes nothing but is still recorded (changed
	// false); a third whose driver destroyed a VM is changed without rows.
	c, err = s.CloudDestroy(ctx, store.CloudDestroyParams{Provider: "local", VMIDs: []string{"vm-1"}, SIDs: []string{"vm-1.local.test"}, AlreadyGone: []string{"vm-1"}, Actor: "tok_creator"})
	if err != nil || c != (store.CloudCascade{}) {
		t.Fatalf("second cascade = %+v, %v", c, err)
	}
	c, err = s.CloudDestroy(ctx, store.CloudDestroyParams{Provider: "local", VMIDs: []string{"vm-2"}, SIDs: []string{"vm-2.local.test"}, Destroyed: []string{"vm-2"}, Actor: "tok_creator"})
	if err != nil || c != (store.CloudCascade{}) {
		t.Fatalf("third cascade = %+v, %v", c, err)
	}
	// Destroyed souls do not keep their provider in use; a live one does.
	if _, err := s.SoulCreate(ctx, store.SoulCreateParams{Soul: store.Soul{SID: "live.local.test", Provider: "local", Connection: store.Connection{Transport: "ssh", User: "root", Port: 22}}, Actor: "tok_t"}); err != nil {
		t.Fatal(err)
	}
	if err := s.ProviderDelete(ctx, store.DeleteParams{Key: "local", Actor: "tok_t"}); !errors.Is(err, store.ErrInUse) || !strings.Contains(err.Error(), "soul live.local.test") {
		t.Fatalf("delete provider with a live soul: %v", err)
	}
	if err := s.SoulDelete(ctx, store.DeleteParams{Key: "live.local.test", Actor: "tok_t"}); err != nil {
		t.Fatal(err)
	}
	if err := s.ProviderDelete(ctx, store.DeleteParams{Key: "local", Actor: "tok_t"}); err != nil {
		t.Fatalf("delete provider whose souls are all destroyed: %v", err)
	}
	if so, err := s.SoulGet(ctx, "vm-1.local.test"); err != nil || so.Status != store.SoulDestroyed || so.Provider != "" {
		t.Fatalf("destroyed soul after its provider went = %+v, %v", so, err)
	}
	events, _ := s.AuditList(ctx, store.AuditListParams{})
	var destroys []string
	n := 0
	for _, e := range events {
		if e.Action == "cloud.provisioned" {
			n++
			if e.ActorAID != "tok_creator" {
				t.Fatalf("cloud.provisioned by %q, want the run's creator: %s", e.ActorAID, e.Payload)
			}
			if strings.Contains(e.Payload, `"action":"destroyed"`) {
				var p struct {
					Changed     bool     `json:"changed"`
					Destroyed   []string `json:"destroyed_now"`
					AlreadyGone []string `json:"already_gone"`
				}
				if err := json.Unmarshal([]byte(e.Payload), &p); err != nil || p.Destroyed == nil || p.AlreadyGone == nil {
					t.Fatalf("destroy payload %s: %v", e.Payload, err)
				}
				destroys = append(destroys, fmt.Sprintf("changed=%v now=%v gone=%v", p.Changed, p.Destroyed, p.AlreadyGone))
			}
		}
	}
	want := []string{"changed=true now=[] gone=[vm-1 vm-2]", "changed=false now=[] gone=[vm-1]", "changed=true now=[vm-2] gone=[]"}
	if n != 4 || fmt.Sprint(destroys) != fmt.Sprint(want) {
		t.Fatalf("cloud.provisioned events = %d, destroys %q; want 4 and %q", n, destroys, want)
	}
}

func testCloudAuditFailure(t *testing.T, b testdb.Backend) {
	s := b.Open(t)
	mustProvider(t, s, "local")
	souls, tokens := cloudSouls()
	b.BreakAudit(t, s.DB())
	if err := s.CloudProvision(ctx, store.CloudProvisionParams{RequestID: "req_x", Souls: souls, Tokens: tokens}); err == nil {
		t.Fatal("provision succeeded although its audit write failed")
	}
	if _, err := s.SoulGet(ctx, "vm-1.local.test"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("soul kept after a failed audit: %v", err)
	}
	if toks, _ := s.BootstrapTokens(ctx, "vm-1.local.test"); len(toks) != 0 {
		t.Fatalf("tokens kept after a failed audit: %+v", toks)
	}
}

// testCloudDestroyFiltered: the destroy cascade touches only souls whose
// provider and vm_id match the pair given: a hand-registered soul, a soul of
// another VM or of another provider is never marked destroyed, whatever
// sids says.
func testCloudDestroyFiltered(t *testing.T, b testdb.Backend) {
	s := b.Open(t)
	mustProvider(t, s, "local")
	mustProvider(t, s, "other")
	if err := s.CloudRequestCreate(ctx, store.CloudRequest{RequestID: "req_1", RunID: "run_1", Step: "provision", Provider: "local", Count: 2}); err != nil {
		t.Fatal(err)
	}
	souls, tokens := cloudSouls()
	if err := s.CloudProvision(ctx, store.CloudProvisionParams{RequestID: "req_1", Souls: souls, Tokens: tokens, Actor: "tok_creator"}); err != nil {
		t.Fatal(err)
	}
	conn := store.Connection{Transport: "ssh", User: "root", Port: 22}
	// Hand-registered: no vm_id, even one that names the provider.
	for _, so := range []store.Soul{{SID: "db.example.com", Connection: conn}, {SID: "pet.local.test", Provider: "local", Connection: conn}} {
		if _, err := s.SoulCreate(ctx, store.SoulCreateParams{Soul: so, Actor: "tok_admin"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.DB().Exec(`INSERT INTO soul_seeds (sid, scenario, input, status) VALUES ('db.example.com', 'x', '{}', 'active')`); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		p    store.CloudDestroyParams
	}{
		{"hand-registered souls with a real VM", store.CloudDestroyParams{Provider: "local", VMIDs: []string{"vm-1"}, SIDs: []string{"db.example.com", "pet.local.test"}}},
		{"hand-registered souls with an empty vm id", store.CloudDestroyParams{Provider: "local", VMIDs: []string{""}, SIDs: []string{"db.example.com", "pet.local.test"}}},
		{"a soul of another VM", store.CloudDestroyParams{Provider: "local", VMIDs: []string{"vm-1"}, SIDs: []string{"vm-2.local.test"}}},
		{"the right pair under another provider", store.CloudDestroyParams{Provider: "other", VMIDs: []string{"vm-1"}, SIDs: []string{"vm-1.local.test"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.p.Actor = "tok_creator"
			c, err := s.CloudDestroy(ctx, tt.p)
			if err != nil || c != (store.CloudCascade{}) {
				t.Fatalf("cascade = %+v, %v; want nothing changed", c, err)
			}
		})
	}
	for _, sid := range []string{"db.example.com", "pet.local.test", "vm-1.local.test", "vm-2.local.test"} {
		so, err := s.SoulGet(ctx, sid)
		if err != nil || so.Status == store.SoulDestroyed {
			t.Fatalf("soul %s = %+v, %v; want it untouched", sid, so, err)
		}
	}
	if toks, _ := s.BootstrapTokens(ctx, "vm-2.local.test"); len(toks) != 1 || toks[0].Status != store.BootstrapIssued {
		t.Fatalf("tokens of vm-2 = %+v", toks)
	}
	var seed string
	if err := s.DB().QueryRow(`SELECT status FROM soul_seeds WHERE sid = 'db.example.com'`).Scan(&seed); err != nil || seed != "active" {
		t.Fatalf("seed of the hand-registered soul = %q, %v", seed, err)
	}
	// The right pair, mixed with a hand-registered soul: only the pair.
	c, err := s.CloudDestroy(ctx, store.CloudDestroyParams{Provider: "local", VMIDs: []string{"vm-1"}, SIDs: []string{"vm-1.local.test", "db.example.com"}, Actor: "tok_creator"})
	if err != nil || c != (store.CloudCascade{SoulsDestroyed: 1, TokensBurned: 1}) {
		t.Fatalf("cascade = %+v, %v", c, err)
	}
	if so, _ := s.SoulGet(ctx, "db.example.com"); so.Status != store.SoulActive {
		t.Fatalf("hand-registered soul = %+v", so)
	}
}
