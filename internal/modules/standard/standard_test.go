package standard_test

import (
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/soulstack/soulstack/internal/auth"
	"github.com/soulstack/soulstack/internal/module"
	"github.com/soulstack/soulstack/internal/modules/cloud"
	"github.com/soulstack/soulstack/internal/modules/command"
	"github.com/soulstack/soulstack/internal/modules/docker"
	"github.com/soulstack/soulstack/internal/modules/file"
	"github.com/soulstack/soulstack/internal/modules/pkg"
	"github.com/soulstack/soulstack/internal/modules/postgres"
	"github.com/soulstack/soulstack/internal/modules/script"
	_ "github.com/soulstack/soulstack/internal/modules/standard"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// catalog is the first catalog (DESIGN.md section 6) with, for each state,
// the struct its Run decodes params into and its side.
var catalog = []struct {
	id     module.ID
	params any
	side   module.Side
}{
	{cloud.CreatedID, cloud.CreatedParams{}, module.SideKeeper},
	{cloud.DestroyedID, cloud.DestroyedParams{}, module.SideKeeper},
	{cloud.ResizedID, cloud.ResizedParams{}, module.SideKeeper},
	{command.RanID, command.RanParams{}, module.SideSoul},
	{docker.InstalledID, docker.InstalledParams{}, module.SideSoul},
	{file.PresentID, file.PresentParams{}, module.SideSoul},
	{pkg.InstalledID, pkg.InstalledParams{}, module.SideSoul},
	{pkg.RemovedID, pkg.RemovedParams{}, module.SideSoul},
	{postgres.InstalledID, postgres.InstalledParams{}, module.SideSoul},
	{script.RanID, script.RanParams{}, module.SideSoul},
}

func TestCatalogRegistered(t *testing.T) {
	t.Parallel()
	ids := module.IDs()
	for _, c := range catalog {
		if !slices.Contains(ids, c.id) {
			t.Errorf("%s is not registered", c.id)
		}
	}
}

// TestPermissions: every keeper-side state names the permission its run's
// creator needs, and it is one the keeper's RBAC knows (a typo would make
// every scenario with the state unrunnable).
func TestPermissions(t *testing.T) {
	t.Parallel()
	want := map[module.ID]auth.Permission{cloud.CreatedID: auth.CloudCreate, cloud.DestroyedID: auth.CloudDestroy, cloud.ResizedID: auth.CloudResize}
	for _, m := range module.All() {
		info := m.Info()
		if !strings.HasPrefix(string(info.ID), "core.") {
			continue
		}
		if got := auth.Permission(info.Permission); got != want[info.ID] {
			t.Errorf("%s declares permission %q; want %q", info.ID, got, want[info.ID])
		}
		if info.Permission != "" && !auth.ValidPermission(auth.Permission(info.Permission)) {
			t.Errorf("%s declares %q, which auth does not know", info.ID, info.Permission)
		}
		if auth.Can("operator", auth.Permission(info.Permission)) && info.Permission != "" {
			t.Errorf("%s: the operator role holds %s", info.ID, info.Permission)
		}
	}
}

func TestDeclarations(t *testing.T) {
	t.Parallel()
	for _, c := range catalog {
		t.Run(string(c.id), func(t *testing.T) {
			t.Parallel()
			m, err := module.Lookup(c.id)
			if err != nil {
				t.Fatal(err)
			}
			info := m.Info()
			if info.Side != c.side {
				t.Errorf("side = %s; want %s", info.Side, c.side)
			}
			if info.Example == "" || info.ChangesWhen == "" || info.UnchangedWhen == "" || len(info.Output) == 0 {
				t.Error("declaration lacks an example, change semantics or output fields")
			}
			// The params struct and the declared params name the same keys.
			var fields []string
			rt := reflect.TypeOf(c.params)
			for i := 0; i < rt.NumField(); i++ {
				fields = append(fields, strings.Split(rt.Field(i).Tag.Get("json"), ",")[0])
			}
			var declared []string
			for _, p := range info.Params {
				declared = append(declared, p.Name)
			}
			slices.Sort(fields)
			slices.Sort(declared)
			if !slices.Equal(fields, declared) {
				t.Errorf("params struct fields %v differ from declared params %v", fields, declared)
			}
			// Modules without their own implementation yet are declared
			// only; the implemented ones are tested in their packages.
			if implemented[info.ID] {
				return
			}
			_, err = m.Run(context.Background(), module.RunInfo{}, []byte(`{}`), nil)
			if !errors.Is(err, module.ErrNotImplemented) || module.Code(err) != module.CodeNotImplemented {
				t.Errorf("Run = %v; want a module.not_implemented error", err)
			}
		})
	}
}

// implemented lists the modules whose Run works in this build.
var implemented = map[module.ID]bool{"core.command.ran": true, "core.file.present": true, "core.script.ran": true, "core.cloud.created": true, "core.cloud.destroyed": true, "core.cloud.resized": true, "core.postgres.installed": true, "core.docker.installed": true, "core.pkg.installed": true, "core.pkg.removed": true}

// TestCatalogPages renders every page; the golden files are the pages
// `soulctl modules show` prints.
func TestCatalogPages(t *testing.T) {
	t.Parallel()
	for _, c := range catalog {
		t.Run(string(c.id), func(t *testing.T) {
			t.Parallel()
			m, err := module.Lookup(c.id)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, string(c.id)+".md.golden", module.RenderMarkdown(m.Info()))
		})
	}
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file (run go test -update to accept):\n%s", name, got)
	}
}

func TestParamChecks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		id    module.ID
		known map[string]any
		want  []string
	}{
		{"command ok", command.RanID, map[string]any{"cmd": "true", "creates": "/tmp/x"}, nil},
		{"command both", command.RanID, map[string]any{"cmd": "true", "argv": []any{"true"}}, []string{"param_conflict"}},
		{"command neither", command.RanID, map[string]any{"chdir": "/"}, []string{"missing_param"}},
		{"command relative guard", command.RanID, map[string]any{"cmd": "true", "creates": "x"}, []string{"param_invalid"}},
		{"command empty argv", command.RanID, map[string]any{"argv": []any{}}, []string{"param_invalid"}},
		{"command env not strings", command.RanID, map[string]any{"cmd": "true", "env": map[string]any{"A": int64(1)}}, []string{"param_type"}},
		{"file ok", file.PresentID, map[string]any{"path": "/etc/motd", "content": "x", "mode": "0644"}, nil},
		{"file bad mode", file.PresentID, map[string]any{"path": "/etc/motd", "mode": "rw"}, []string{"param_invalid"}},
		{"file int mode", file.PresentID, map[string]any{"path": "/etc/motd", "mode": int64(644)}, []string{"param_type"}},
		{"file content and source", file.PresentID, map[string]any{"path": "/x", "content": "", "source": "y"}, []string{"param_conflict"}},
		{"script default interpreter", script.RanID, map[string]any{"source": "echo {}"}, nil},
		{"script event must be object", script.RanID, map[string]any{"source": "echo {}", "event": []any{}}, []string{"param_type"}},
		{"pkg ok", pkg.InstalledID, map[string]any{"packages": []any{"git", "curl=7.88"}}, nil},
		{"pkg empty", pkg.InstalledID, map[string]any{"packages": []any{}}, []string{"param_invalid"}},
		{"pkg bad name", pkg.RemovedID, map[string]any{"packages": []any{"-y"}}, []string{"param_invalid"}},
		{"pkg bad delay", pkg.InstalledID, map[string]any{"packages": []any{"git"}, "lock_retry_delay": "soon"}, []string{"param_invalid"}},
		{"docker bad source", docker.InstalledID, map[string]any{"source": "snap"}, []string{"param_invalid"}},
		{"postgres missing password", postgres.InstalledID, map[string]any{"db_name": "app", "db_user": "app"}, []string{"missing_param"}},
		{"postgres bad name", postgres.InstalledID, map[string]any{"db_name": "App; drop", "db_user": "app", "db_password": "x"}, []string{"param_invalid"}},
		{"cloud ok", cloud.CreatedID, map[string]any{"provider": "local", "count": int64(2)}, nil},
		{"cloud zero count", cloud.CreatedID, map[string]any{"provider": "local", "count": int64(0)}, []string{"param_invalid"}},
		{"cloud self onboard without name", cloud.CreatedID, map[string]any{"provider": "local", "self_onboard": true}, []string{"param_invalid"}},
		{"cloud userdata conflict", cloud.CreatedID, map[string]any{"provider": "local", "userdata": "x", "self_onboard": true, "name": "w"}, []string{"param_conflict"}},
		{"destroy empty", cloud.DestroyedID, map[string]any{"provider": "local", "vm_ids": []any{}}, []string{"param_invalid"}},
		{"resize needs profile", cloud.ResizedID, map[string]any{"provider": "local", "vm_ids": []any{"a"}}, []string{"missing_param"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, err := module.Lookup(tt.id)
			if err != nil {
				t.Fatal(err)
			}
			var v module.Values
			for k, x := range tt.known {
				v.Set(k, x)
			}
			var got []string
			for _, e := range module.CheckParams(m, v) {
				got = append(got, string(e.Problem))
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("CheckParams = %v; want %v", got, tt.want)
			}
		})
	}
}
