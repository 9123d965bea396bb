package api_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/testdb"
)

// TestTokenPermissions: a token gets a built-in role or an explicit
// permission list, never both; unknown permissions are named; a token can
// grant only permissions it holds itself; what a token holds is shown and
// decides what it may do.
func TestTokenPermissions(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, k *keeper) {
		admin := k.client(k.admin)
		ctx := context.Background()
		cases := []struct {
			name, body, code, location string
		}{
			{"both", `{"name":"x","role":"viewer","permissions":["run.read"]}`, "token.grant_ambiguous", "body.permissions"},
			{"neither", `{"name":"x"}`, "token.grant_missing", "body.role"},
			{"empty list", `{"name":"x","permissions":[]}`, "token.permissions_empty", "body.permissions"},
			{"unknown", `{"name":"x","permissions":["run.read","cloud.launch"]}`, "token.permission_unknown", "body.permissions[1]"},
			{"unknown role", `{"name":"x","role":"root"}`, "token.role_unknown", "body.role"},
		}
		for _, c := range cases {
			b := k.expect("POST", "/v1/tokens", k.admin, c.body, 422, c.code)
			var p client.Problem
			_ = json.Unmarshal(b, &p)
			if len(p.Errors) != 1 || p.Errors[0].Location != c.location {
				t.Errorf("%s: problem %s; want it at %s", c.name, b, c.location)
			}
		}
		if !strings.Contains(string(k.expect("POST", "/v1/tokens", k.admin, cases[3].body, 422, "")), `unknown permission \"cloud.launch\"`) {
			t.Error("the unknown permission is not named")
		}

		// Duplicates collapse; the list is stored in documented order.
		mgr, err := admin.TokenCreate(ctx, client.TokenCreate{Name: "mgr", Permissions: []string{"token.manage", "provider.read", "cloud.create", "provider.read"}})
		if err != nil || mgr.Role != "custom" || strings.Join(mgr.Permissions, ",") != "provider.read,token.manage,cloud.create" {
			t.Fatalf("custom token = %+v, %v", mgr, err)
		}
		k.expect("GET", "/v1/providers", mgr.Token, "", 200, "")
		k.expect("GET", "/v1/souls", mgr.Token, "", 403, "auth.forbidden")

		// No escalation through token.manage.
		before := k.auditCount()
		for _, body := range []string{
			`{"name":"y","role":"admin"}`,
			`{"name":"y","role":"viewer"}`, // viewer reads souls, mgr does not
			`{"name":"y","permissions":["cloud.destroy"]}`,
		} {
			b := k.expect("POST", "/v1/tokens", mgr.Token, body, 403, "auth.forbidden")
			if !strings.Contains(string(b), "a token can grant only permissions it holds itself") {
				t.Errorf("escalation refusal %s", b)
			}
		}
		if n := k.auditCount(); n != before {
			t.Fatalf("refused token requests wrote %d audit events", n-before)
		}
		sub, err := k.client(mgr.Token).TokenCreate(ctx, client.TokenCreate{Name: "sub", Permissions: []string{"cloud.create"}})
		if err != nil || strings.Join(sub.Permissions, ",") != "cloud.create" {
			t.Fatalf("a subset of its own permissions: %+v, %v", sub, err)
		}

		// Every token lists what it holds.
		list, err := admin.TokenList(ctx, client.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, tk := range list.Items {
			got[tk.Name] = tk.Role + ":" + strings.Join(tk.Permissions, ",")
		}
		if got["mgr"] != "custom:provider.read,token.manage,cloud.create" || got["sub"] != "custom:cloud.create" ||
			!strings.Contains(got["admin"], "cloud.create,cloud.destroy,cloud.resize") {
			t.Fatalf("token list = %v", got)
		}
	})
}

// TestOpenAPITokenPermissions: the generated document describes the
// permissions of a token and of a module.
func TestOpenAPITokenPermissions(t *testing.T) {
	t.Parallel()
	k := start(t, testdb.SQLite)
	_, b := k.call("GET", "/openapi.json", "", "")
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Required   []string                  `json:"required"`
				Properties map[string]map[string]any `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	create := doc.Components.Schemas["TokenCreate"]
	if _, ok := create.Properties["permissions"]; !ok || strings.Contains(strings.Join(create.Required, ","), "role") {
		t.Errorf("TokenCreate = %+v; want permissions, and role optional", create)
	}
	if _, ok := doc.Components.Schemas["Token"].Properties["permissions"]; !ok {
		t.Error("Token lacks permissions")
	}
	if _, ok := doc.Components.Schemas["Module"].Properties["permission"]; !ok {
		t.Error("Module lacks permission")
	}
}
