package api_test

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/store"
)

// TestSoulListFilters: GET /v1/souls?status=&provider=&label= on a real
// listening keeper, on both backends, keeps the souls matching every
// filter, pages through them with next, and refuses bad filter values
// with a precise problem.
func TestSoulListFilters(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, k *keeper) {
		k.expect("POST", "/v1/providers", k.admin, `{"name":"local","driver":"local"}`, 201, "")
		for _, so := range []store.Soul{
			{SID: "db-1", Status: store.SoulActive, Attributes: json.RawMessage(`{"role":"db"}`)},
			{SID: "vm-1", Status: store.SoulActive, Provider: "local", Attributes: json.RawMessage(`{"role":"web","dc":"fsn1"}`)},
			{SID: "vm-2", Status: store.SoulUnreachable, Provider: "local", Attributes: json.RawMessage(`{"role":"web"}`)},
			{SID: "vm-3", Status: store.SoulActive, Provider: "local", Attributes: json.RawMessage(`{"role":"web"}`)},
			{SID: "web-1", Status: store.SoulActive, Attributes: json.RawMessage(`{"role":"web","note":"a=b"}`)},
		} {
			so.Address = "10.0.0.1"
			if _, err := k.store.SoulCreate(context.Background(), store.SoulCreateParams{Soul: so, Actor: store.ActorKeeper}); err != nil {
				t.Fatal(err)
			}
		}
		list := func(q url.Values) (sids []string) {
			t.Helper()
			for {
				var l client.SoulList
				if err := json.Unmarshal(k.expect("GET", "/v1/souls?"+q.Encode(), k.admin, "", 200, ""), &l); err != nil {
					t.Fatal(err)
				}
				for _, s := range l.Items {
					sids = append(sids, s.SID)
				}
				if l.Next == "" {
					return sids
				}
				q.Set("after", l.Next)
			}
		}
		for _, c := range []struct {
			query, want string
		}{
			{"", "db-1,vm-1,vm-2,vm-3,web-1"},
			{"status=active", "db-1,vm-1,vm-3,web-1"},
			{"status=unreachable", "vm-2"},
			{"provider=local", "vm-1,vm-2,vm-3"},
			{"label=role=web", "vm-1,vm-2,vm-3,web-1"},
			{"label=note=a=b", "web-1"}, // the value is everything after the first '='
			{"label=role=", ""},
			{"status=active&provider=local&label=role=web", "vm-1,vm-3"},
			{"status=active&label=role=web&limit=1", "vm-1,vm-3,web-1"},
			{"label=role=web'%20OR%20'1'='1", ""}, // bound as a value, never SQL
		} {
			q, err := url.ParseQuery(c.query)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(list(q), ","); got != c.want {
				t.Errorf("GET /v1/souls?%s = %q, want %q", c.query, got, c.want)
			}
		}

		before := k.auditCount()
		for _, c := range []struct {
			query, code, location string
		}{
			{"status=gone", "request.invalid", "query.status"},
			{"status=Active", "request.invalid", "query.status"},
			{"provider=Local_Cloud", "name.invalid", "query.provider"},
			{"provider=" + strings.Repeat("a", 64), "request.invalid", "query.provider"},
			{"label=role", "soul.label_invalid", "query.label"},
			{"label=%3Dweb", "soul.label_invalid", "query.label"},
			{"label=ro%20le=web", "soul.label_invalid", "query.label"},
			{"label=role=w%0Aeb", "soul.label_invalid", "query.label"},
			{"label=role=w%FFeb", "soul.label_invalid", "query.label"},
			{"label=" + strings.Repeat("k", 129) + "=v", "soul.label_invalid", "query.label"},
			{"label=k=" + strings.Repeat("v", 1025), "soul.label_invalid", "query.label"},
			{"label=k=" + strings.Repeat("v", 1300), "request.invalid", "query.label"},
		} {
			b := k.expect("GET", "/v1/souls?"+c.query, k.admin, "", 422, c.code)
			var p client.Problem
			_ = json.Unmarshal(b, &p)
			found := false
			for _, e := range p.Errors {
				found = found || e.Location == c.location
			}
			if p.Detail == "" || !found {
				t.Errorf("GET /v1/souls?%.60s: problem %s does not explain and locate %s", c.query, b, c.location)
			}
		}
		if n := k.auditCount(); n != before {
			t.Fatalf("refused lists wrote %d audit events", n-before)
		}
		if got := strings.Join(list(url.Values{}), ","); got != "db-1,vm-1,vm-2,vm-3,web-1" {
			t.Fatalf("souls after the refused queries = %s", got)
		}
	})
}

// TestSoulListLabelNoSecretOracle performs the attack against a real
// keeper: a viewer, who sees a soul's vault_token attribute as "***",
// tries to confirm a guessed value through ?label=; and a token stored in
// a plain attribute is probed the same way. Each probe is refused with
// soul.label_secret without echoing the guess, whether the guess is right
// or wrong, so the answer tells nothing.
func TestSoulListLabelNoSecretOracle(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, k *keeper) {
		const canary = "canary-vault-7f3a91"
		apiToken := "sst_" + strings.Repeat("Q", 43)
		if _, err := k.store.SoulCreate(context.Background(), store.SoulCreateParams{Soul: store.Soul{
			SID: "vault-1", Status: store.SoulActive, Address: "10.0.0.1",
			Attributes: json.RawMessage(`{"vault_token":"` + canary + `","X-Api-Key":"k1","note":"` + apiToken + `"}`),
		}, Actor: store.ActorKeeper}); err != nil {
			t.Fatal(err)
		}
		var tok client.TokenCreated
		if err := json.Unmarshal(k.expect("POST", "/v1/tokens", k.admin, `{"name":"peek","role":"viewer"}`, 201, ""), &tok); err != nil {
			t.Fatal(err)
		}
		if b := k.expect("GET", "/v1/souls/vault-1", tok.Token, "", 200, ""); strings.Contains(string(b), canary) || strings.Contains(string(b), apiToken) {
			t.Fatalf("the soul leaks its secrets to a viewer: %s", b)
		}
		for _, probe := range []string{
			"vault_token=" + canary, "vault_token=wrong-guess", "VAULT_TOKEN=" + canary, "x-api-key=k1",
			"note=" + apiToken, "note=sst_" + strings.Repeat("R", 43),
		} {
			for _, who := range []string{tok.Token, k.admin} {
				b := k.expect("GET", "/v1/souls?"+url.Values{"label": {probe}}.Encode(), who, "", 422, "soul.label_secret")
				if strings.Contains(string(b), canary) || strings.Contains(string(b), "sst_") || strings.Contains(string(b), "wrong-guess") {
					t.Fatalf("the refusal echoes the probe: %s", b)
				}
			}
		}
		// A plain attribute still filters.
		if b := k.expect("GET", "/v1/souls?label=note=plain", tok.Token, "", 200, ""); !strings.Contains(string(b), `"items":[]`) {
			t.Fatalf("plain label: %s", b)
		}
	})
}
