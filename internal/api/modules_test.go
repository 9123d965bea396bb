package api_test

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/module"
	"github.com/soulstack/soulstack/internal/testdb"
)

// secretDefault is a module whose secret param has a default: the catalog
// masks that default.
type secretDefault struct{}

func (secretDefault) Info() module.Info {
	return module.Info{
		ID: secretDefaultID, Summary: "A module with a secret default.", Side: module.SideSoul,
		Params: []module.Param{
			{Name: "password", Type: module.TypeString, Secret: true, Default: "hunter2-default", Doc: "A secret."},
			{Name: "count", Type: module.TypeInt, Default: 2, Doc: "Not secret."},
		},
	}
}

func (secretDefault) Run(context.Context, module.RunInfo, json.RawMessage, module.Target) (module.Result, error) {
	return module.Result{}, module.NotImplemented(secretDefaultID)
}

const secretDefaultID module.ID = "apitest.secret.kept"

func init() { module.Register(secretDefault{}) }

// TestModuleCatalog: the catalog routes serve every registered module to
// any valid token, exactly as declared, and refuse unknown and malformed
// IDs with precise problems.
func TestModuleCatalog(t *testing.T) {
	t.Parallel()
	k := start(t, testdb.SQLite)
	viewer := k.token("viewer")

	k.expect("GET", "/v1/modules", "", "", 401, "auth.missing_token")
	k.expect("GET", "/v1/modules/core.command.ran", "sst_not-a-token", "", 401, "auth.invalid_token")

	b := k.expect("GET", "/v1/modules", viewer, "", 200, "")
	var list client.ModuleList
	if err := json.Unmarshal(b, &list); err != nil {
		t.Fatalf("decode list: %v\n%s", err, b)
	}
	all := module.All()
	if len(list.Items) != len(all) || len(all) == 0 {
		t.Fatalf("list has %d modules, the registry %d", len(list.Items), len(all))
	}
	for _, id := range []string{"core.cloud.created", "core.command.ran", "core.file.present", "core.script.ran", "core.pkg.installed", "core.postgres.installed"} {
		if !strings.Contains(string(b), `"id":"`+id+`"`) {
			t.Errorf("the catalog lacks %s", id)
		}
	}

	for i, m := range all {
		info := m.Info()
		if info.ID == secretDefaultID {
			continue
		}
		t.Run(string(info.ID), func(t *testing.T) {
			if list.Items[i].ID != string(info.ID) {
				t.Fatalf("list item %d is %s, want %s (sorted by ID)", i, list.Items[i].ID, info.ID)
			}
			b := k.expect("GET", "/v1/modules/"+string(info.ID), viewer, "", 200, "")
			// The wire object is the declaration's JSON, field for field.
			var got, want map[string]any
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			decl, _ := json.Marshal(info)
			if err := json.Unmarshal(decl, &want); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("GET /v1/modules/%s =\n%s\nwant the declaration\n%s", info.ID, b, decl)
			}
			var one client.Module
			if err := json.Unmarshal(b, &one); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(one, list.Items[i]) {
				t.Errorf("the list's entry differs from GET's")
			}
		})
	}

	// Secret flags travel as booleans: the catalog is not key-name masked.
	pg, err := k.client(viewer).ModuleGet(context.Background(), "core.postgres.installed")
	if err != nil {
		t.Fatal(err)
	}
	var sawSecret bool
	for _, p := range pg.Params {
		if p.Name == "db_password" {
			sawSecret = p.Secret && p.Required
		}
	}
	if !sawSecret {
		t.Errorf("core.postgres.installed: db_password is not a required secret param: %+v", pg.Params)
	}

	// The default of a secret param never leaves the keeper.
	b = k.expect("GET", "/v1/modules/"+string(secretDefaultID), viewer, "", 200, "")
	if strings.Contains(string(b), "hunter2") || !strings.Contains(string(b), `"default":"***"`) || !strings.Contains(string(b), `"default":2`) {
		t.Errorf("secret default not masked, or other default lost: %s", b)
	}

	k.expect("GET", "/v1/modules/core.nothing.here", viewer, "", 404, "module.not_found")
	for _, bad := range []string{"core.command", "Core.command.ran", "core..ran", "a.b.c.d", "core.command.ran-x"} {
		b := k.expect("GET", "/v1/modules/"+bad, viewer, "", 422, "module.id_invalid")
		if !strings.Contains(string(b), `"location":"path.id"`) {
			t.Errorf("%s: problem does not locate the id: %s", bad, b)
		}
	}
}
