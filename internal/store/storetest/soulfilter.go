package storetest

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/testdb"
)

// testSoulFilters: SoulSearch keeps the souls matching every filter set,
// in SID order, paged; an attribute matches only as the same string.
func testSoulFilters(t *testing.T, b testdb.Backend) {
	s := b.Open(t)
	mustProvider(t, s, "local")
	mustProvider(t, s, "hcloud")
	souls := []struct {
		sid, status, provider, attrs string
	}{
		{"a1", store.SoulActive, "", `{"role":"web","dc":"fsn1"}`},
		{"a2", store.SoulActive, "local", `{"role":"db"}`},
		{"a3", store.SoulUnreachable, "local", `{"role":"web"}`},
		{"a4", store.SoulPending, "hcloud", `{"role":"web","dc":"nbg1"}`},
		{"a5", store.SoulActive, "local", `{"role":"web","n":1}`},
		{"a6", store.SoulActive, "hcloud", `{"roleX":"web","n":"1","deep":{"role":"web"}}`},
		{"a7", store.SoulDestroyed, "local", `{"role":"web ","a.b":"x","q\"k":"y","[0]":"z"}`},
	}
	for _, so := range souls {
		if _, err := s.SoulCreate(ctx, store.SoulCreateParams{Soul: store.Soul{
			SID: so.sid, Status: so.status, Provider: so.provider, Address: "10.0.0.1", Attributes: json.RawMessage(so.attrs),
		}, Actor: "tok_test"}); err != nil {
			t.Fatal(err)
		}
	}
	sids := func(p store.SoulListParams) string {
		t.Helper()
		var out []string
		for {
			page, err := s.SoulSearch(ctx, p)
			if err != nil {
				t.Fatalf("search %+v: %v", p, err)
			}
			if len(page) == 0 {
				return strings.Join(out, ",")
			}
			for _, so := range page {
				out = append(out, so.SID)
			}
			p.After = page[len(page)-1].SID
		}
	}
	label := func(k, v string) *store.Label { return &store.Label{Key: k, Value: v} }
	for _, c := range []struct {
		p    store.SoulListParams
		want string
	}{
		{store.SoulListParams{}, "a1,a2,a3,a4,a5,a6,a7"},
		{store.SoulListParams{Status: store.SoulActive}, "a1,a2,a5,a6"},
		{store.SoulListParams{Status: store.SoulDestroyed}, "a7"},
		{store.SoulListParams{Provider: "local"}, "a2,a3,a5,a7"},
		{store.SoulListParams{Provider: "ghost"}, ""},
		{store.SoulListParams{Label: label("role", "web")}, "a1,a3,a4,a5"},
		{store.SoulListParams{Label: label("dc", "fsn1")}, "a1"},
		{store.SoulListParams{Label: label("n", "1")}, "a6"},               // a5's n is the number 1, not the string
		{store.SoulListParams{Label: label("role", "we")}, ""},             // whole value, not a prefix
		{store.SoulListParams{Label: label("role", "web%")}, ""},           // no wildcards
		{store.SoulListParams{Label: label("ro%", "web")}, ""},             // nor in the key
		{store.SoulListParams{Label: label("deep.role", "web")}, ""},       // keys are not paths
		{store.SoulListParams{Label: label("a.b", "x")}, "a7"},             // a dot in a key is literal
		{store.SoulListParams{Label: label(`q"k`, "y")}, "a7"},             // so is a double quote
		{store.SoulListParams{Label: label("[0]", "z")}, "a7"},             // and brackets
		{store.SoulListParams{Label: label("deep", `{"role":"web"}`)}, ""}, // an object is not a string
		{store.SoulListParams{Status: store.SoulActive, Provider: "local", Label: label("role", "web")}, "a5"},
		{store.SoulListParams{ListParams: store.ListParams{Limit: 1}, Provider: "local", Label: label("role", "web")}, "a3,a5"},
		{store.SoulListParams{ListParams: store.ListParams{After: "a3"}, Label: label("role", "web")}, "a4,a5"},
	} {
		if got := sids(c.p); got != c.want {
			t.Errorf("search %s = %q, want %q", describe(c.p), got, c.want)
		}
	}
	// SoulList is the unfiltered search.
	all, err := s.SoulList(ctx, store.ListParams{Limit: 3, After: "a2"})
	if err != nil || len(all) != 3 || all[0].SID != "a3" || all[2].SID != "a5" {
		t.Fatalf("list after a2 = %v, %v", all, err)
	}
}

func describe(p store.SoulListParams) string {
	d := fmt.Sprintf("limit=%d after=%q status=%q provider=%q", p.Limit, p.After, p.Status, p.Provider)
	if p.Label != nil {
		d += fmt.Sprintf(" label=%s=%s", p.Label.Key, p.Label.Value)
	}
	return d
}

// SoulFiltersMigration checks migration 00016 on a registry made at
// version 10: the souls' list indexes appear, the souls stay and filter.
// indexes is the dialect's query for the names of the souls table's
// indexes.
func SoulFiltersMigration(t *testing.T, db *sql.DB, indexes string, upTo func(ctx context.Context, version int64) error, up func(ctx context.Context) error) {
	t.Helper()
	if err := upTo(ctx, 10); err != nil {
		t.Fatalf("migrate to version 10: %v", err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO souls (sid, status, address, attributes, created_at, updated_at) VALUES ('old.local.test', 'unreachable', '10.0.0.9', '{"role":"db"}', '2026-01-01 00:00:00', '2026-01-01 00:00:00')`); err != nil {
		t.Fatalf("insert a soul before the migration: %v", err)
	}
	names := func() map[string]bool {
		t.Helper()
		rows, err := db.QueryContext(ctx, indexes)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[string]bool{}
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				t.Fatal(err)
			}
			out[n] = true
		}
		return out
	}
	if before := names(); before["souls_status_sid"] || before["souls_provider_sid"] {
		t.Fatalf("indexes before migration 00016: %v", before)
	}
	if err := up(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	after := names()
	if !after["souls_status_sid"] || !after["souls_provider_sid"] {
		t.Fatalf("indexes after migration 00016: %v", after)
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM souls WHERE status = 'unreachable' AND sid > ''`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the soul made before the migration: %d, %v", n, err)
	}
}
