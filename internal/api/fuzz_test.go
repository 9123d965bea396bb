package api_test

import (
	"encoding/json"
	"net/http"
	"regexp"
	"testing"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/testdb"
)

var label = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// FuzzDecodeProvider sends arbitrary bodies to POST /v1/providers on a real
// listening keeper: the answer is 201 or a 4xx problem with a code, never a
// 5xx, and what is accepted is a valid provider that reads back.
func FuzzDecodeProvider(f *testing.F) {
	for _, seed := range []string{
		`{"name":"local","driver":"local"}`,
		`{"name":"a","driver":"b","region":"r","credentials_ref":"env:X","fqdn_suffix":"local.test","config":{"k":[1,2,{"token":"x"}]}}`,
		`{"name":"","driver":"local"}`, `{"name":"x","driver":"local","extra":1}`, `{"name":"x",`, `[]`, `null`, `"str"`,
		`{"name":"x","driver":"local","credentials_ref":"vault:a#b"}`, `{"name":"x","driver":"local","config":null}`,
	} {
		f.Add(seed)
	}
	k := start(f, testdb.SQLite)
	f.Fuzz(func(t *testing.T, body string) {
		k := *k
		k.t = t
		status, b := k.call(http.MethodPost, "/v1/providers", k.admin, body)
		switch {
		case status == http.StatusCreated:
			var p client.Provider
			if err := json.Unmarshal(b, &p); err != nil || !label.MatchString(p.Name) || !label.MatchString(p.Driver) {
				t.Fatalf("accepted an invalid provider: %s", b)
			}
			if got, gb := k.call(http.MethodGet, "/v1/providers/"+p.Name, k.admin, ""); got != http.StatusOK {
				t.Fatalf("accepted provider does not read back: %d %s", got, gb)
			}
			k.call(http.MethodDelete, "/v1/providers/"+p.Name, k.admin, "")
		case status >= 400 && status < 500:
			var p client.Problem
			if err := json.Unmarshal(b, &p); err != nil || p.Code == "" || p.Status != status {
				t.Fatalf("status %d without a problem document: %s", status, b)
			}
		default:
			t.Fatalf("status %d for body %q: %s", status, body, b)
		}
	})
}
