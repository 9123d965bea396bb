package storetest

import (
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
