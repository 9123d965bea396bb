package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/module"
	_ "github.com/soulstack/soulstack/internal/modules/standard"
)

// TestModulePageMatchesCatalog: `soulctl modules show` prints, from the
// wire object, exactly the page the module package renders from the
// declaration, for every module of the standard set and for the catalog's
// own golden pages.
func TestModulePageMatchesCatalog(t *testing.T) {
	t.Parallel()
	for _, m := range module.All() {
		info := m.Info()
		t.Run(string(info.ID), func(t *testing.T) {
			t.Parallel()
			got := renderPage(t, wireModule(t, info))
			if want := module.RenderText(info); got != want {
				t.Errorf("page differs from module.RenderText:\n--- got\n%s\n--- want\n%s", got, want)
			}
		})
	}

	// The declarations behind internal/module/testdata/*.txt.golden,
	// as the keeper sends them.
	golden := map[string]string{
		"cloud": `{"id":"test.cloud.created","summary":"Ask the provider for ` + "`count`" + ` VMs: each gets a souls row (status pending) and a bootstrap token.",
			"description":"Runs on the keeper through the provider's CloudDriver plugin.\n\nThe SID of a created host is the FQDN the provider returned.",
			"side":"keeper","idempotent":false,"needs_root":false,"permission":"cloud.create",
			"params":[
				{"name":"provider","type":"string","required":true,"doc":"Name of the Cloud-Provider in the registry."},
				{"name":"profile","type":"any","doc":"VM profile: a registered profile's name or an inline map."},
				{"name":"count","type":"int","default":1,"doc":"How many VMs to create (>= 1)."},
				{"name":"userdata","type":"string","doc":"Cloud-init userdata."},
				{"name":"generate_userdata","type":"bool","doc":"Generate userdata from keeper.yml cloud_init."},
				{"name":"tags","type":"list","elem":"string","default":["a|b"],"doc":"Tags."},
				{"name":"token","type":"string","secret":true,"default_doc":"a fresh token","doc":"A secret."},
				{"name":"mode","type":"string","enum":["fast","slow"],"doc":"Speed."}],
			"exclusive":[{"params":["userdata","generate_userdata"]}],
			"output":[
				{"name":"hosts","type":"array<object>","doc":"One entry per VM: {sid, vm_id, primary_ip, attributes?, bootstrap_token}."},
				{"name":"count","type":"int","doc":"Number of VMs created."}],
			"changes_when":"Always: a repeat creates new VMs.","unchanged_when":"Never.",
			"example":"- name: provision\n  on: keeper\n  module: test.cloud.created\n  params:\n    provider: local\n",
			"notes":["Not idempotent by construction.","Audit event cloud.provisioned on every state."]}`,
		"minimal": `{"id":"test.noop.done","summary":"Do nothing.","side":"soul","idempotent":true,"needs_root":true,"params":[],"output":[],"changes_when":"","unchanged_when":""}`,
	}
	for name, doc := range golden {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var m client.Module
			if err := json.Unmarshal([]byte(doc), &m); err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(filepath.Join("..", "module", "testdata", name+".txt.golden"))
			if err != nil {
				t.Fatal(err)
			}
			if got := renderPage(t, m); got != string(want) {
				t.Errorf("page differs from %s.txt.golden:\n--- got\n%s\n--- want\n%s", name, got, want)
			}
		})
	}
}

// wireModule is info as the keeper serves it: its JSON decoded into the
// wire type.
func wireModule(t *testing.T, info module.Info) client.Module {
	t.Helper()
	b, err := json.Marshal(info)
	if err != nil {
		t.Fatal(err)
	}
	var m client.Module
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func renderPage(t *testing.T, m client.Module) string {
	t.Helper()
	var b strings.Builder
	if err := modulePage(m).render(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}
