// Package storetest is the conformance suite every store.Store backend
// passes; each test runs on a fresh database.
package storetest

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/audit"
	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/store/sqlstore"
	"github.com/soulstack/soulstack/internal/testdb"
)

// Run runs the whole suite against backend b.
func Run(t *testing.T, b testdb.Backend) {
	tests := []struct {
		name string
		fn   func(t *testing.T, b testdb.Backend)
	}{
		{"ProviderCRUD", testProviderCRUD},
		{"ProfileNeedsProvider", testProfileNeedsProvider},
		{"ConcurrentDuplicateCreate", testConcurrentDuplicate},
		{"ConcurrentProfileAndProviderDelete", testConcurrentProfileVsDelete},
		{"Pagination", testPagination},
		{"Souls", testSouls},
		{"SoulFilters", testSoulFilters},
		{"Tokens", testTokens},
		{"TokenAdminBootstrap", testTokenAdminBootstrap},
		{"AuditChain", testAuditChain},
		{"AuditTamper", testAuditTamper},
		{"AuditFailureFailsMutation", testAuditFailure},
		{"AuditPayloadMasked", testAuditMasked},
		{"AuditKeyed", testAuditKeyed},
		{"AuditAttacks", testAuditAttacks},
		{"AuditLegacyUpgrade", testAuditLegacyUpgrade},
		{"AuditCheckpointer", testAuditCheckpointer},
		{"AuditCheckpointConcurrent", testAuditCheckpointConcurrent},
		{"RunCreateKey", testRunCreateKey},
		{"RunLifecycle", testRunLifecycle},
		{"RunBatches", testRunBatches},
		{"RunListFilters", testRunListFilters},
		{"Counts", testCounts},
		{"SoulHostKey", testSoulHostKey},
		{"SoulContact", testSoulContact},
		{"SoulExecutor", testSoulExecutor},
		{"SoulContactConcurrent", testSoulContactConcurrent},
		{"CloudProvisionAndDestroy", testCloudProvisionAndDestroy},
		{"CloudAuditFailure", testCloudAuditFailure},
		{"CloudDestroyFiltered", testCloudDestroyFiltered},
		{"DeploymentID", testDeploymentID},
		{"SoulJoin", testSoulJoin},
		{"SoulJoinPinned", testSoulJoinPinned},
		{"SoulJoinConcurrent", testSoulJoinConcurrent},
		{"SeedAdd", testSeedAdd},
		{"Changes", testChanges},
		{"ChangesOfRunsAndDrift", testChangesOfRunsAndDrift},
		{"Sealed", testSealed},
		{"Sessions", testSessions},
		{"Drift", testDrift},
		{"Projects", testProjects},
		{"Bindings", testBindings},
		{"Shares", testShares},
		{"RunQuota", testRunQuota},
		{"PersonTokens", testPersonTokens},
		{"OIDCCodes", testOIDCCodes},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, b)
		})
	}
}

var ctx = context.Background()

func mustProvider(t *testing.T, s store.Store, name string) store.Provider {
	t.Helper()
	p, err := s.ProviderCreate(ctx, store.ProviderCreateParams{
		Provider: store.Provider{Name: name, Driver: "local", Region: "here", CredentialsRef: "env:LOCAL_CREDS", FQDNSuffix: "local.test", Config: json.RawMessage(`{"subnet":"10.213.0.0/24"}`)},
		Actor:    "tok_test",
	})
	if err != nil {
		t.Fatalf("create provider %s: %v", name, err)
	}
	return p
}

func mustProfile(t *testing.T, s store.Store, name, provider string) {
	t.Helper()
	if _, err := s.ProfileCreate(ctx, store.ProfileCreateParams{Profile: store.Profile{Name: name, Provider: provider, Spec: json.RawMessage(`{"cpus":1}`)}, Actor: "tok_test"}); err != nil {
		t.Fatalf("create profile %s: %v", name, err)
	}
}

func jsonEqual(t *testing.T, got json.RawMessage, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("stored JSON %q does not parse: %v", got, err)
	}
	_ = json.Unmarshal([]byte(want), &w)
	gb, _ := json.Marshal(g)
	wb, _ := json.Marshal(w)
	if string(gb) != string(wb) {
		t.Fatalf("JSON = %s, want %s", gb, wb)
	}
}

func testProviderCRUD(t *testing.T, b testdb.Backend) {
	s := b.Open(t)
	p := mustProvider(t, s, "aws-prod")
	if p.CredentialsRef != "env:LOCAL_CREDS" || p.Driver != "local" || p.CreatedBy != "tok_test" || p.CreatedAt.IsZero() {
		t.Fatalf("created provider = %+v", p)
	}
	got, err := s.ProviderGet(ctx, "aws-prod")
	if err != nil {
		t.Fatal(err)
	}
	jsonEqual(t, got.Config, `{"subnet":"10.213.0.0/24"}`)
	if !got.CreatedAt.Equal(p.CreatedAt) {
		t.Fatalf("created_at round trip: %v != %v", got.CreatedAt, p.CreatedAt)
	}
	_, err = s.ProviderCreate(ctx, store.ProviderCreateParams{Provider: store.Provider{Name: "aws-prod", Driver: "x"}, Actor: "tok_test"})
	if !errors.Is(err, store.ErrExists) {
		t.Fatalf("duplicate create: err = %v, want ErrExists", err)
	}
	if _, err := s.ProviderGet(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get unknown: err = %v, want ErrNotFound", err)
	}
	if err := s.ProviderDelete(ctx, store.DeleteParams{Key: "nope", Actor: "tok_test"}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("delete unknown: err = %v, want ErrNotFound", err)
	}
	if err := s.ProviderDelete(ctx, store.DeleteParams{Key: "aws-prod", Actor: "tok_test"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ProviderGet(ctx, "aws-prod"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get after delete: err = %v", err)
	}
}

func testProfileNeedsProvider(t *testing.T, b testdb.Backend) {
	s := b.Open(t)
	_, err := s.ProfileCreate(ctx, store.ProfileCreateParams{Profile: store.Profile{Name: "small", Provider: "ghost"}, Actor: "tok_test"})
	var se *store.Error
	if !errors.Is(err, store.ErrReferenceMissing) || !errors.As(err, &se) || se.Ref != "provider ghost" {
		t.Fatalf("profile with unknown provider: err = %v, want ErrReferenceMissing naming provider ghost", err)
	}
	mustProvider(t, s, "local")
	mustProfile(t, s, "small", "local")
	err = s.ProviderDelete(ctx, store.DeleteParams{Key: "local", Actor: "tok_test"})
	if !errors.Is(err, store.ErrInUse) || !strings.Contains(err.Error(), "small") {
		t.Fatalf("delete provider in use: err = %v, want ErrInUse naming profile small", err)
	}
	if _, err := s.ProviderGet(ctx, "local"); err != nil {
		t.Fatalf("provider must survive a refused delete: %v", err)
	}
	if err := s.ProfileDelete(ctx, store.DeleteParams{Key: "small", Actor: "tok_test"}); err != nil {
		t.Fatal(err)
	}
	if err := s.ProviderDelete(ctx, store.DeleteParams{Key: "local", Actor: "tok_test"}); err != nil {
		t.Fatalf("delete provider after its profile is gone: %v", err)
	}
}

// testConcurrentDuplicate proves the database, not a pre-check, decides:
// of many concurrent creates of one name exactly one wins.
func testConcurrentDuplicate(t *testing.T, b testdb.Backend) {
	s := b.Open(t)
	const n = 16
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = s.ProviderCreate(ctx, store.ProviderCreateParams{Provider: store.Provider{Name: "race", Driver: fmt.Sprint("d", i)}, Actor: "tok_test"})
		}()
	}
	wg.Wait()
	wins := 0
	for _, err := range errs {
		switch {
		case err == nil:
			wins++
		case errors.Is(err, store.ErrExists):
		default:
			t.Fatalf("unexpected error: %v", err)
		}
	}
	if wins != 1 {
		t.Fatalf("%d concurrent creates won, want exactly 1", wins)
	}
	verifyChain(t, s, 1)
}

// testConcurrentProfileVsDelete races a profile create against the delete
// of its provider: never may both succeed.
func testConcurrentProfileVsDelete(t *testing.T, b testdb.Backend) {
	s := b.Open(t)
	for i := range 10 {
		prov := fmt.Sprintf("p%d", i)
		mustProvider(t, s, prov)
		var wg sync.WaitGroup
		var createErr, deleteErr error
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, createErr = s.ProfileCreate(ctx, store.ProfileCreateParams{Profile: store.Profile{Name: "prof" + prov, Provider: prov}, Actor: "tok_test"})
		}()
		go func() {
			defer wg.Done()
			deleteErr = s.ProviderDelete(ctx, store.DeleteParams{Key: prov, Actor: "tok_test"})
		}()
		wg.Wait()
		switch {
		case createErr == nil && deleteErr == nil:
			t.Fatalf("round %d: both the profile create and the provider delete succeeded", i)
		case createErr == nil && !errors.Is(deleteErr, store.ErrInUse):
			t.Fatalf("round %d: delete err = %v, want ErrInUse", i, deleteErr)
		case deleteErr == nil && !errors.Is(createErr, store.ErrReferenceMissing):
			t.Fatalf("round %d: create err = %v, want ErrReferenceMissing", i, createErr)
		}
	}
}

func testPagination(t *testing.T, b testdb.Backend) {
	s := b.Open(t)
	for _, n := range []string{"e", "a", "c", "b", "d"} {
		mustProvider(t, s, n)
	}
	var seen []string
	after := ""
	for {
		page, err := s.ProviderList(ctx, store.ListParams{Limit: 2, After: after})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, p := range page {
			seen = append(seen, p.Name)
		}
		after = page[len(page)-1].Name
	}
	if strings.Join(seen, ",") != "a,b,c,d,e" {
		t.Fatalf("paged providers = %v, want a..e in order", seen)
	}
}

func testSouls(t *testing.T, b testdb.Backend) {
	s := b.Open(t)
	aid := "tok_test"
	so, err := s.SoulCreate(ctx, store.SoulCreateParams{Soul: store.Soul{
		SID: "web-1.example.com", Address: "127.0.0.2", Attributes: json.RawMessage(`{"role":"web"}`),
		Connection:   store.Connection{Transport: "ssh", User: "deploy", Port: 2222, KeyRef: "file:/etc/keys/id"},
		CreatedByAID: &aid,
	}, Actor: store.Actor(aid)})
	if err != nil {
		t.Fatal(err)
	}
	if so.Status != store.SoulActive || so.Connection.Port != 2222 || so.Connection.KeyRef != "file:/etc/keys/id" || so.CreatedByAID == nil || *so.CreatedByAID != aid {
		t.Fatalf("soul = %+v", so)
	}
	jsonEqual(t, so.Attributes, `{"role":"web"}`)
	if _, err := s.SoulCreate(ctx, store.SoulCreateParams{Soul: store.Soul{SID: "web-1.example.com"}, Actor: "tok_test"}); !errors.Is(err, store.ErrExists) {
		t.Fatalf("duplicate soul: %v", err)
	}
	if _, err := s.SoulCreate(ctx, store.SoulCreateParams{Soul: store.Soul{SID: "vm-1.local.test", Provider: "ghost"}, Actor: "keeper"}); !errors.Is(err, store.ErrReferenceMissing) {
		t.Fatalf("soul with unknown provider: %v", err)
	}
	list, err := s.SoulList(ctx, store.ListParams{})
	if err != nil || len(list) != 1 {
		t.Fatalf("list = %v, %v", list, err)
	}
	if err := s.SoulDelete(ctx, store.DeleteParams{Key: "web-1.example.com", Actor: "tok_test"}); err != nil {
		t.Fatal(err)
	}
	if err := s.SoulDelete(ctx, store.DeleteParams{Key: "web-1.example.com", Actor: "tok_test"}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
}

func testTokens(t *testing.T, b testdb.Backend) {
	s := b.Open(t)
	admin := store.APIToken{ID: "tok_001", Name: "admin", Role: "admin", Hash: "h1"}
	created, err := s.TokenBootstrap(ctx, store.TokenCreateParams{Token: admin, Actor: store.ActorKeeper})
	if err != nil || !created {
		t.Fatalf("bootstrap on empty registry: created=%v err=%v", created, err)
	}
	created, err = s.TokenBootstrap(ctx, store.TokenCreateParams{Token: store.APIToken{ID: "tok_002", Name: "admin", Role: "admin", Hash: "h2"}, Actor: store.ActorKeeper})
	if err != nil || created {
		t.Fatalf("second bootstrap: created=%v err=%v, want false, nil", created, err)
	}
	exp := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	ci, err := s.TokenCreate(ctx, store.TokenCreateParams{Token: store.APIToken{ID: "tok_003", Name: "ci", Role: "operator", Hash: "h3", ExpiresAt: &exp}, Actor: "tok_001"})
	if err != nil {
		t.Fatal(err)
	}
	if ci.ExpiresAt == nil || !ci.ExpiresAt.Equal(exp) || ci.CreatedBy != "tok_001" {
		t.Fatalf("token = %+v", ci)
	}
	got, err := s.TokenGetByHash(ctx, "h3")
	if err != nil || got.ID != "tok_003" || !got.Active(time.Now()) || got.Active(exp.Add(time.Second)) {
		t.Fatalf("by hash = %+v, %v", got, err)
	}
	if _, err := s.TokenGetByHash(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown hash: %v", err)
	}
	if err := s.TokenRevoke(ctx, store.DeleteParams{Key: "tok_001", Actor: "tok_001"}); !errors.Is(err, store.ErrLastAdmin) {
		t.Fatalf("revoke last admin: %v, want ErrLastAdmin", err)
	}
	if err := s.TokenRevoke(ctx, store.DeleteParams{Key: "tok_003", Actor: "tok_001"}); err != nil {
		t.Fatal(err)
	}
	if err := s.TokenRevoke(ctx, store.DeleteParams{Key: "tok_003", Actor: "tok_001"}); !errors.Is(err, store.ErrRevoked) {
		t.Fatalf("second revoke: %v", err)
	}
	if err := s.TokenRevoke(ctx, store.DeleteParams{Key: "tok_999", Actor: "tok_001"}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("revoke unknown: %v", err)
	}
	got, _ = s.TokenGetByHash(ctx, "h3")
	if got.RevokedAt == nil || got.Active(time.Now()) {
		t.Fatalf("revoked token still active: %+v", got)
	}
	// A custom token keeps its explicit permission list (migration 00004).
	custom, err := s.TokenCreate(ctx, store.TokenCreateParams{Token: store.APIToken{ID: "tok_004", Name: "cloud-ci", Role: "custom", Permissions: []string{"run.create", "cloud.create"}, Hash: "h4"}, Actor: "tok_001"})
	if err != nil || custom.Role != "custom" || fmt.Sprint(custom.Permissions) != "[run.create cloud.create]" {
		t.Fatalf("custom token = %+v, %v", custom, err)
	}
	byID, err := s.TokenGet(ctx, "tok_004")
	if err != nil || byID.Hash != "h4" || fmt.Sprint(byID.Permissions) != "[run.create cloud.create]" {
		t.Fatalf("by id = %+v, %v", byID, err)
	}
	if byID, err := s.TokenGet(ctx, "tok_003"); err != nil || byID.RevokedAt == nil || byID.Permissions != nil {
		t.Fatalf("revoked built-in token by id = %+v, %v", byID, err)
	}
	if _, err := s.TokenGet(ctx, "tok_999"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown id: %v", err)
	}
	list, err := s.TokenList(ctx, store.ListParams{})
	if err != nil || len(list) != 3 || list[0].ID != "tok_001" || list[1].ID != "tok_003" || fmt.Sprint(list[2].Permissions) != "[run.create cloud.create]" {
		t.Fatalf("list = %+v, %v", list, err)
	}
	events, _ := s.AuditList(ctx, store.AuditListParams{})
	last := events[len(events)-1]
	if last.Action != "token.created" || !strings.Contains(last.Payload, `"permissions":["run.create","cloud.create"]`) {
		t.Fatalf("audit of the custom token = %s %s", last.Action, last.Payload)
	}
}

func testTokenAdminBootstrap(t *testing.T, b testdb.Backend) {
	s := b.Open(t)
	mint := func(id string, force bool) (store.APIToken, error) {
		return s.TokenAdminBootstrap(ctx, store.TokenAdminParams{Token: store.APIToken{ID: id, Name: "admin", Hash: "hash-" + id}, Actor: store.ActorHost, Force: force})
	}
	// An empty registry has no active admin: one is minted.
	first, err := mint("tok_001", false)
	if err != nil || first.Role != "admin" || first.CreatedBy != string(store.ActorHost) || first.ExpiresAt != nil {
		t.Fatalf("mint on an empty registry: %+v, %v", first, err)
	}
	// With an active admin it is refused, naming it.
	var se *store.Error
	if _, err := mint("tok_002", false); !errors.As(err, &se) || !errors.Is(err, store.ErrActiveAdmin) || se.Key != "tok_001" {
		t.Fatalf("mint with an active admin: %v, want ErrActiveAdmin naming tok_001", err)
	}
	// Admins that expired or were revoked, and non-admins, do not count.
	// (tok_003 is minted by another token than tok_001: one tok_001
	// minted would be revoked with it.)
	soon := time.Now().Add(time.Hour).UTC()
	if _, err := s.TokenCreate(ctx, store.TokenCreateParams{Token: store.APIToken{ID: "tok_003", Name: "soon", Role: "admin", Hash: "h3", ExpiresAt: &soon}, Actor: "tok_elsewhere"}); err != nil {
		t.Fatal(err)
	}
	if err := s.TokenRevoke(ctx, store.DeleteParams{Key: "tok_001", Actor: "tok_003"}); err != nil {
		t.Fatal(err)
	}
	if _, err := mint("tok_004", false); !errors.As(err, &se) || se.Key != "tok_003" {
		t.Fatalf("mint while an admin that expires later is active: %v, want ErrActiveAdmin naming tok_003", err)
	}
	if _, err := s.TokenCreate(ctx, store.TokenCreateParams{Token: store.APIToken{ID: "tok_005", Name: "ops", Role: "operator", Hash: "h5"}, Actor: "tok_003"}); err != nil {
		t.Fatal(err)
	}
	// The token expires (a literal time: it reads the same on both backends).
	if _, err := s.DB().ExecContext(ctx, `UPDATE api_tokens SET expires_at = '2000-01-01 00:00:00' WHERE id = 'tok_003'`); err != nil {
		t.Fatal(err)
	}
	minted, err := mint("tok_006", false)
	if err != nil || minted.ID != "tok_006" || !minted.Active(time.Now()) {
		t.Fatalf("mint after the last admin expired: %+v, %v", minted, err)
	}
	// Force mints beside an active admin.
	if _, err := mint("tok_007", true); err != nil {
		t.Fatalf("forced mint: %v", err)
	}
	var created []audit.Event
	if _, err := s.AuditScan(ctx, func(e audit.Event) error {
		if e.Action == "token.created" && e.ActorAID == string(store.ActorHost) {
			created = append(created, e)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(created) != 3 || !strings.Contains(string(created[2].Payload), `"force":true`) || !strings.Contains(string(created[2].Payload), `"tok_006"`) {
		t.Fatalf("audit of host-minted tokens = %+v", created)
	}
}

func verifyChain(t *testing.T, s store.Store, wantEvents int64) audit.Report {
	t.Helper()
	r, err := audit.Verify(ctx, s, testdb.AuditKey, nil)
	if err != nil {
		t.Fatal(err)
	}
	head := audit.Head{Seq: r.HeadSeq}
	if !r.OK || r.Checked != wantEvents || head.Seq != wantEvents {
		t.Fatalf("audit verify: %+v (head %d), want ok with %d events", r, head.Seq, wantEvents)
	}
	return r
}

func testAuditChain(t *testing.T, b testdb.Backend) {
	s := b.Open(t)
	mustProvider(t, s, "local")
	mustProfile(t, s, "small", "local")
	if err := s.ProfileDelete(ctx, store.DeleteParams{Key: "small", Actor: "tok_other"}); err != nil {
		t.Fatal(err)
	}
	// A refused mutation writes nothing.
	_ = s.ProviderDelete(ctx, store.DeleteParams{Key: "ghost", Actor: "tok_test"})
	events, err := s.AuditList(ctx, store.AuditListParams{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range events {
		got = append(got, e.Action+" "+e.Object+" "+e.ActorAID)
	}
	want := "provider.created provider/local tok_test,profile.created profile/small tok_test,profile.deleted profile/small tok_other"
	if strings.Join(got, ",") != want {
		t.Fatalf("audit = %v\nwant %v", got, want)
	}
	if events[0].PrevHash != audit.GenesisHash || events[1].PrevHash != events[0].Hash {
		t.Fatal("events are not chained")
	}
	page, _ := s.AuditList(ctx, store.AuditListParams{AfterSeq: 1, Limit: 1})
	if len(page) != 1 || page[0].Seq != 2 {
		t.Fatalf("page after 1 = %+v", page)
	}
	// Concurrent mutations still form one unbroken chain.
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.ProviderCreate(ctx, store.ProviderCreateParams{Provider: store.Provider{Name: fmt.Sprint("c", i), Driver: "local"}, Actor: "tok_test"}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	verifyChain(t, s, 15)
}

func tamperReport(t *testing.T, s *sqlstore.Store) audit.Report {
	t.Helper()
	r, err := audit.Verify(ctx, s, testdb.AuditKey, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func testAuditTamper(t *testing.T, b testdb.Backend) {
	cases := []struct {
		name     string
		tamper   string
		wantSeq  int64
		wantKind string
	}{
		{"edited payload", `UPDATE audit_events SET payload = '{"name":"evil"}' WHERE seq = 2`, 2, audit.ProblemRowTampered},
		{"edited actor", `UPDATE audit_events SET actor_aid = 'tok_someone_else' WHERE seq = 3`, 3, audit.ProblemRowTampered},
		{"deleted middle row", `DELETE FROM audit_events WHERE seq = 2`, 3, audit.ProblemRowsMissing},
		{"deleted last row", `DELETE FROM audit_events WHERE seq = 4`, 4, audit.ProblemTruncated},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := b.Open(t)
			for _, n := range []string{"a", "b", "c", "d"} {
				mustProvider(t, s, n)
			}
			verifyChain(t, s, 4)
			if _, err := s.DB().Exec(tc.tamper); err != nil {
				t.Fatal(err)
			}
			r := tamperReport(t, s)
			if r.OK {
				t.Fatalf("verify passed after %s", tc.name)
			}
			found := false
			for _, p := range r.Problems {
				if p.Seq == tc.wantSeq && p.Kind == tc.wantKind {
					found = true
				}
			}
			if !found {
				t.Fatalf("problems = %+v, want %s at row %d", r.Problems, tc.wantKind, tc.wantSeq)
			}
		})
	}
}

func testAuditFailure(t *testing.T, b testdb.Backend) {
	s := b.Open(t)
	mustProvider(t, s, "before")
	b.BreakAudit(t, s.DB())
	_, err := s.ProviderCreate(ctx, store.ProviderCreateParams{Provider: store.Provider{Name: "after", Driver: "local"}, Actor: "tok_test"})
	if err == nil {
		t.Fatal("create succeeded although its audit write failed")
	}
	if _, err := s.ProviderGet(ctx, "after"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("provider exists after a failed audit write: %v", err)
	}
	if err := s.ProviderDelete(ctx, store.DeleteParams{Key: "before", Actor: "tok_test"}); err == nil {
		t.Fatal("delete succeeded although its audit write failed")
	}
	if _, err := s.ProviderGet(ctx, "before"); err != nil {
		t.Fatalf("provider gone after a failed audit write: %v", err)
	}
	var n int
	if err := s.DB().QueryRow(`SELECT COUNT(*) FROM audit_events`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("audit rows = %d, %v; want 1", n, err)
	}
}

func testAuditMasked(t *testing.T, b testdb.Backend) {
	s := b.Open(t)
	const canary = "canary-5f1e0c9a"
	_, err := s.ProviderCreate(ctx, store.ProviderCreateParams{Provider: store.Provider{
		Name: "leaky", Driver: "local", CredentialsRef: "vault:kv/cloud#key",
		Config: json.RawMessage(`{"api_token":"` + canary + `","nested":{"db_password":"` + canary + `"},"subnet":"10.0.0.0/24"}`),
	}, Actor: "tok_test"})
	if err != nil {
		t.Fatal(err)
	}
	events, err := s.AuditList(ctx, store.AuditListParams{})
	if err != nil || len(events) != 1 {
		t.Fatalf("events = %v, %v", events, err)
	}
	p := events[0].Payload
	if strings.Contains(p, canary) {
		t.Fatalf("audit payload leaks a secret: %s", p)
	}
	if !strings.Contains(p, "vault:kv/cloud#key") || !strings.Contains(p, "10.0.0.0/24") {
		t.Fatalf("audit payload lost non-secret fields: %s", p)
	}
	var rows *sql.Rows
	rows, err = s.DB().Query(`SELECT payload FROM audit_events`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var raw string
		_ = rows.Scan(&raw)
		if strings.Contains(raw, canary) {
			t.Fatalf("stored audit row leaks a secret: %s", raw)
		}
	}
}
