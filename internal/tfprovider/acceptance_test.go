package tfprovider_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/soulstack/soulstack/driversdk"
	"github.com/soulstack/soulstack/internal/config"
	"github.com/soulstack/soulstack/internal/drivers/nubes/nubesfake"
	"github.com/soulstack/soulstack/internal/keepertest"
	"github.com/soulstack/soulstack/internal/modules/moduletest"
	"github.com/soulstack/soulstack/internal/scenario"
	"github.com/soulstack/soulstack/internal/sshtest"
)

// terraformBin returns a terraform or tofu binary, or skips the test.
func terraformBin(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"terraform", "tofu"} {
		if p, err := exec.LookPath(name); err == nil {
			if testing.Short() {
				t.Skip("-short: skipping the terraform run")
			}
			return p
		}
	}
	t.Log("skipping: neither terraform nor tofu is on PATH (the protocol-level tests cover the provider)")
	t.Skip("neither terraform nor tofu is on PATH")
	return ""
}

// example is a copy of examples/terraform in a temporary directory that a
// real terraform applies against a keeper, with the provider built from
// this tree through a dev_overrides CLI config and trace logs on.
type example struct {
	t     *testing.T
	bin   string
	work  string
	tfLog string
	env   []string
}

// newExample copies the example and writes vars as its tfvars.
func newExample(t *testing.T, k *testKeeper, vars map[string]any) *example {
	t.Helper()
	bin := terraformBin(t)
	tmp := t.TempDir()
	pluginDir := filepath.Join(tmp, "plugins")
	if out, err := exec.Command("go", "build", "-o", filepath.Join(pluginDir, "terraform-provider-soulstack"), "../../cmd/terraform-provider-soulstack").CombinedOutput(); err != nil {
		t.Fatalf("build provider: %v\n%s", err, out)
	}
	cliConfig := filepath.Join(tmp, "dev.tfrc")
	rc := `provider_installation {
  dev_overrides {
    "soulstack/soulstack" = "` + pluginDir + `"
  }
  direct {}
}
`
	if err := os.WriteFile(cliConfig, []byte(rc), 0o644); err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(tmp, "example")
	if err := os.CopyFS(work, os.DirFS("../../examples/terraform")); err != nil {
		t.Fatal(err)
	}
	vars["keeper_endpoint"] = k.URL
	b, _ := json.Marshal(vars)
	if err := os.WriteFile(filepath.Join(work, "test.auto.tfvars.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	e := &example{t: t, bin: bin, work: work, tfLog: filepath.Join(tmp, "terraform.log")}
	e.env = []string{"TF_CLI_CONFIG_FILE=" + cliConfig, "TF_IN_AUTOMATION=1", "TF_LOG=trace", "TF_LOG_PATH=" + e.tfLog,
		"TF_VAR_keeper_token=" + k.Token, "CHECKPOINT_DISABLE=1", "HOME=" + tmp}
	for _, v := range os.Environ() {
		if !strings.HasPrefix(v, "TF_") && !strings.HasPrefix(v, "SOULSTACK_") && !strings.HasPrefix(v, "HOME=") {
			e.env = append(e.env, v)
		}
	}
	return e
}

// run runs terraform with args in the example and returns its output; an
// exit code other than wantCode fails the test.
func (e *example) run(wantCode int, args ...string) string {
	e.t.Helper()
	cmd := exec.Command(e.bin, append(args, "-no-color", "-input=false")...)
	cmd.Dir, cmd.Env = e.work, e.env
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		e.t.Fatal(err)
	}
	if code != wantCode {
		e.t.Fatalf("%s %s: exit %d, want %d\n%s", filepath.Base(e.bin), strings.Join(args, " "), code, wantCode, out)
	}
	return string(out)
}

// outputs returns the example's outputs (terraform output -json), each
// output's value as JSON text.
func (e *example) outputs() map[string]string {
	e.t.Helper()
	cmd := exec.Command(e.bin, "output", "-json")
	cmd.Dir, cmd.Env = e.work, e.env
	out, err := cmd.Output()
	if err != nil {
		e.t.Fatalf("terraform output -json: %v\n%s", err, out)
	}
	var raw map[string]struct{ Value json.RawMessage }
	if err := json.Unmarshal(out, &raw); err != nil {
		e.t.Fatalf("terraform output -json: %v\n%s", err, out)
	}
	m := map[string]string{}
	for k, v := range raw {
		m[k] = string(v.Value)
	}
	return m
}

// TestExampleWithTerraform runs examples/terraform end to end with a real
// terraform or tofu binary, through a dev_overrides CLI config, against a
// keeper and an sshd registered as the existing host. It installs an
// already-installed package, so it changes nothing on this machine.
func TestExampleWithTerraform(t *testing.T) {
	t.Parallel()
	k := startKeeper(t)
	s := sshtest.Start(t, sshtest.Options{})
	keyFile := filepath.Join(t.TempDir(), "id_ed25519")
	if err := os.WriteFile(keyFile, s.ClientKey, 0o600); err != nil {
		t.Fatal(err)
	}
	const pgPassword = "pg-Secret-4b1c-never-shown"
	e := newExample(t, k, map[string]any{
		"install_packages": true,
		"base_packages":    []string{"coreutils"},
		"pg_db_password":   pgPassword,
		"existing_host": map[string]any{
			"sid": "vm-1.example.test", "address": s.Addr, "user": s.User, "port": s.Port, "key_ref": "file:" + keyFile,
		},
	})
	// A run that echoes a sensitive_input value: the plan hides it, the
	// keeper masks it in the outputs, no log has it.
	extra := `resource "soulstack_run" "secret_echo" {
  scenario = <<-EOT
    name: secret-echo
    inputs:
      host: {type: string}
      db_password: {type: string, secret: true}
    steps:
      - name: echo
        on: "$${ input.host }"
        module: core.command.ran
        params: {argv: [echo, "$${ input.db_password }"]}
  EOT
  input           = jsonencode({ host = local.hosts[0] })
  sensitive_input = jsonencode({ db_password = var.pg_db_password })
}

output "secret_echo" {
  value = jsondecode(soulstack_run.secret_echo.outputs).echo
}
`
	if err := os.WriteFile(filepath.Join(e.work, "secret_echo.tf"), []byte(extra), 0o644); err != nil {
		t.Fatal(err)
	}

	out := e.run(0, "apply", "-auto-approve")
	for _, want := range []string{"***", "(sensitive value)", `packages_status = "ok"`, `docker_status = "skipped"`, `postgres_status = "skipped"`,
		`install_docker_result = "skipped"`, `install_postgres_result = "skipped"`, "vm-1.example.test"} {
		if !strings.Contains(out, want) {
			t.Errorf("apply output lacks %q:\n%s", want, out)
		}
	}
	// install_packages_result is the run's message: the JSON of its
	// outputs, as the seed's job message.
	var res struct {
		Packages map[string]struct {
			Status           string
			AlreadyInstalled []string `json:"already_installed"`
		}
	}
	msg := e.outputs()["install_packages_result"]
	var text string
	if err := json.Unmarshal([]byte(msg), &text); err != nil || json.Unmarshal([]byte(text), &res) != nil ||
		res.Packages["vm-1.example.test"].Status != "ok" || len(res.Packages["vm-1.example.test"].AlreadyInstalled) != 1 {
		t.Errorf("install_packages_result = %s, want the packages run's message JSON", msg)
	}
	runs := k.runCount(t)
	if runs != 2 {
		t.Errorf("runs after apply: %d, want 2", runs)
	}
	// Nothing changed: plan says so (exit 0 with -detailed-exitcode).
	out += e.run(0, "plan", "-detailed-exitcode")

	// With every flag on, the PostgreSQL run waits for the VM (or the
	// existing host) and the packages, not for Docker, and gets the
	// pg_* variables in its input.
	out += e.run(0, "plan", "-out", "all.tfplan", "-var", "install_docker=true", "-var", "install_postgres=true",
		"-var", "pg_version=15", "-var", "pg_listen_addresses=*", "-var", "pg_allow_remote=true")
	checkPlan(t, e, "all.tfplan")

	// Bumping install_run_id runs the installs once more.
	out += e.run(0, "apply", "-auto-approve", "-var", "install_run_id=2")
	if n := k.runCount(t); n != runs+1 {
		t.Errorf("runs after bumping install_run_id: %d, want %d", n, runs+1)
	}
	out += e.run(0, "destroy", "-auto-approve", "-var", "install_run_id=2")

	logData, _ := os.ReadFile(e.tfLog)
	for name, secret := range map[string]string{"token": k.Token, "pg_db_password": pgPassword} {
		if strings.Contains(out, secret) {
			t.Errorf("the %s appears in terraform's output", name)
		}
		if strings.Contains(string(logData), secret) {
			t.Errorf("the %s appears in the TF_LOG=trace log", name)
		}
	}
	if !strings.Contains(string(logData), "starting run") {
		t.Errorf("the trace log has no provider lines (looked for %q); size %s", "starting run", strconv.Itoa(len(logData)))
	}
}

// checkPlan reads a saved plan of the example with every install on
// (terraform show -json) and checks the order the seed asks for: every
// install after the VM, PostgreSQL after the packages but not after
// Docker; and that the PostgreSQL run's input carries pg_version,
// listen_addresses and allow_remote.
func checkPlan(t *testing.T, e *example, planFile string) {
	t.Helper()
	cmd := exec.Command(e.bin, "show", "-json", planFile)
	cmd.Dir, cmd.Env = e.work, e.env
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("terraform show -json: %v", err)
	}
	var plan struct {
		Configuration struct {
			RootModule struct {
				Resources []struct {
					Address     string
					DependsOn   []string                   `json:"depends_on"`
					Expressions map[string]json.RawMessage `json:"expressions"`
				}
			} `json:"root_module"`
		}
		ResourceChanges []struct {
			Address string
			Change  struct{ After map[string]any }
		} `json:"resource_changes"`
	}
	if err := json.Unmarshal(raw, &plan); err != nil {
		t.Fatal(err)
	}
	deps := map[string][]string{}
	for _, r := range plan.Configuration.RootModule.Resources {
		// References in expressions order resources too.
		refs := append([]string(nil), r.DependsOn...)
		for _, x := range r.Expressions {
			var ex struct{ References []string }
			_ = json.Unmarshal(x, &ex)
			refs = append(refs, ex.References...)
		}
		deps[r.Address] = refs
	}
	has := func(list []string, v string) bool {
		for _, x := range list {
			if x == v {
				return true
			}
		}
		return false
	}
	for _, run := range []string{"soulstack_run.packages", "soulstack_run.docker", "soulstack_run.postgres"} {
		if !has(deps[run], "soulstack_run.vms") || !has(deps[run], "soulstack_soul.existing") {
			t.Errorf("%s does not wait for the VM: %v", run, deps[run])
		}
	}
	for _, run := range []string{"soulstack_run.docker", "soulstack_run.postgres"} {
		if !has(deps[run], "soulstack_run.packages") {
			t.Errorf("%s does not wait for the packages: %v", run, deps[run])
		}
	}
	for _, d := range deps["soulstack_run.postgres"] {
		if strings.HasPrefix(d, "soulstack_run.docker") {
			t.Errorf("the PostgreSQL run waits for Docker: %v", deps["soulstack_run.postgres"])
		}
	}
	found := false
	for _, rc := range plan.ResourceChanges {
		if rc.Address != "soulstack_run.postgres[0]" {
			continue
		}
		found = true
		var in map[string]any
		s, _ := rc.Change.After["input"].(string)
		if err := json.Unmarshal([]byte(s), &in); err != nil || in["pg_version"] != "15" || in["listen_addresses"] != "*" || in["allow_remote"] != true {
			t.Errorf("the PostgreSQL run's input = %s, want pg_version 15, listen_addresses *, allow_remote true", s)
		}
	}
	if !found {
		t.Errorf("the plan has no soulstack_run.postgres[0]")
	}
}

// TestExamplePostgresOnVM applies examples/terraform on a local VM
// registered as existing_host — the tested form of the seed's layout,
// with the SSH key given as a reference to the keeper's environment
// (env:), never a file — with install_postgres and the pg_* variables
// set: PostgreSQL is installed on the VM with them, and each
// install_*_result output is that job's message JSON.
func TestExamplePostgresOnVM(t *testing.T) {
	t.Parallel()
	terraformBin(t)
	vm := moduletest.NewVM(t, "deploy", "tfpg.test", "/usr/bin/pg_ctlcluster")
	k := startKeeper(t)
	// The keeper runs in this process: the key is in its environment
	// only, under a name no other test uses.
	keyVar := fmt.Sprintf("SOULSTACK_TEST_VM_KEY_%d", os.Getpid())
	if err := os.Setenv(keyVar, string(vm.ClientKey)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Unsetenv(keyVar) })
	const pgPassword = "pg-Vm-Secret-9e2d-never-shown"
	e := newExample(t, k, map[string]any{
		"install_packages":    true,
		"base_packages":       []string{"coreutils"},
		"install_postgres":    true,
		"pg_version":          "15",
		"pg_listen_addresses": "*",
		"pg_allow_remote":     true,
		"pg_db_name":          "shop",
		"pg_db_user":          "shop_app",
		"pg_db_password":      pgPassword,
		"existing_host": map[string]any{
			"sid": vm.FQDN, "address": vm.PrimaryIP, "user": "deploy", "key_ref": "env:" + keyVar,
		},
	})
	out := e.run(0, "apply", "-auto-approve")
	for _, want := range []string{`packages_status = "ok"`, `postgres_status = "ok"`, `install_docker_result = "skipped"`} {
		if !strings.Contains(out, want) {
			t.Errorf("apply output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, pgPassword) {
		t.Error("the password appears in terraform's output")
	}
	outputs := e.outputs()
	var text string
	if err := json.Unmarshal([]byte(outputs["install_postgres_result"]), &text); err != nil {
		t.Fatalf("install_postgres_result = %s", outputs["install_postgres_result"])
	}
	var res struct {
		Postgres map[string]struct {
			Status        string
			PGVersion     string `json:"pg_version"`
			DBName        string `json:"db_name"`
			DBUser        string `json:"db_user"`
			ConfigChanged bool   `json:"config_changed"`
		}
	}
	if err := json.Unmarshal([]byte(text), &res); err != nil {
		t.Fatalf("install_postgres_result is not the run's message JSON: %q", text)
	}
	if r := res.Postgres[vm.FQDN]; r.Status != "ok" || !strings.HasPrefix(r.PGVersion, "15.") || r.DBName != "shop" || r.DBUser != "shop_app" || !r.ConfigChanged {
		t.Errorf("install_postgres_result = %s", text)
	}
	if strings.Contains(text, pgPassword) {
		t.Error("the password appears in the message")
	}
	if err := json.Unmarshal([]byte(outputs["install_packages_result"]), &text); err != nil || !strings.Contains(text, `"packages":{"`+vm.FQDN+`":{`) {
		t.Errorf("install_packages_result = %s", outputs["install_packages_result"])
	}
	// The variables reached the module: the server listens on *, and
	// pg_hba.conf lets the owner in from other hosts.
	if got := vm.Sh(t, `runuser -u postgres -- psql -XAt -c 'SHOW listen_addresses'`); got != "*" {
		t.Errorf("listen_addresses = %q, want *", got)
	}
	if hba := vm.Sh(t, `cat /etc/postgresql/15/main/pg_hba.conf`); !strings.Contains(hba, "shop") || !strings.Contains(hba, "shop_app") || !strings.Contains(hba, "0.0.0.0/0") {
		t.Errorf("pg_hba.conf has no remote entry for shop_app on shop:\n%s", hba)
	}
	e.run(0, "destroy", "-auto-approve")
}

// TestExampleScenarios validates the example's scenarios as the keeper
// would (every module of the standard set is linked through the keeper),
// so that they stay right where no terraform binary runs them.
func TestExampleScenarios(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("../../examples/terraform/scenarios/*.yaml")
	if err != nil || len(files) < 5 {
		t.Fatalf("scenarios: %v %v", files, err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			t.Parallel()
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := scenario.Check(filepath.Base(f), src); err != nil {
				t.Fatalf("%s does not validate:\n%v", f, err)
			}
		})
	}
}

// TestExampleReadmeHCL parses every hcl snippet of the example's README
// with terraform fmt (no provider needed), so that the worked snippets
// stay valid, and checks that the seed's layout registers the VM as a
// soul from the VM resource's address output with its key as a reference
// variable, never read from a file.
func TestExampleReadmeHCL(t *testing.T) {
	t.Parallel()
	bin := terraformBin(t)
	src, err := os.ReadFile("../../examples/terraform/README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := strings.Split(string(src), "```hcl\n")[1:]
	if len(blocks) < 3 {
		t.Fatalf("the README has %d hcl snippets, want at least 3", len(blocks))
	}
	layout := ""
	for i, b := range blocks {
		b = b[:strings.Index(b, "```")]
		cmd := exec.Command(bin, "fmt", "-no-color", "-")
		cmd.Stdin, cmd.Env = strings.NewReader(b), append(os.Environ(), "CHECKPOINT_DISABLE=1", "TF_CLI_CONFIG_FILE=/dev/null")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("snippet %d does not parse: %v\n%s\n%s", i+1, err, out, b)
		}
		if strings.Contains(b, `resource "soulstack_soul"`) {
			layout = b
		}
	}
	for _, want := range []string{"address = hcloud_server.vm.ipv4_address", "key_ref = var.vm_ssh_key_ref", "hosts = [soulstack_soul.vm.sid]"} {
		if !strings.Contains(layout, want) {
			t.Errorf("the seed's layout snippet lacks %q:\n%s", want, layout)
		}
	}
	if strings.Contains(layout, "file(") {
		t.Errorf("the seed's layout snippet reads a file:\n%s", layout)
	}
}

// TestExampleNubesWithTerraform applies examples/terraform/nubes (the
// nubes provider and profile) and then the seed's layout on them, with a
// real terraform, against a keeper running the real soul-cloud-nubes
// plugin and the FAKE deck-api (nubesfake) whose VMs are local VMs: two
// VMs are made through the deck-api, the packages run installs on them
// over SSH as the profile's user, a second plan changes nothing, and
// terraform destroy leaves no instance and no VM. The deck-api token is
// in no terraform output or log.
func TestExampleNubesWithTerraform(t *testing.T) {
	t.Parallel()
	terraformBin(t)
	if os.Geteuid() != 0 {
		t.Skip("the fake's local VMs need root (scripts/test runs as root in CI)")
	}
	raw := make([]byte, 16)
	_, _ = rand.Read(raw)
	token := "nubes-tf-token-" + hex.EncodeToString(raw)
	f, machines := nubesfake.StartLocal(t, token, nil, false)

	dir := t.TempDir()
	plugins := filepath.Join(dir, "plugins")
	if out, err := exec.Command("go", "build", "-o", filepath.Join(plugins, "soul-cloud-nubes"), "../../cmd/soul-cloud-nubes").CombinedOutput(); err != nil {
		t.Fatalf("build soul-cloud-nubes: %v\n%s", err, out)
	}
	kp := keepertest.Start(t, func(c *config.Config) {
		c.DataDir, c.PluginDir, c.Log.Level = filepath.Join(dir, ".keeper"), plugins, "debug"
		c.Drivers = map[string]config.Driver{"nubes": {Endpoints: []string{f.URL}}}
	})
	k := &testKeeper{URL: kp.URL, Token: kp.Token, Dir: dir, Logs: kp.Logs, C: kp.Client}
	if _, err := k.C.CredentialPut(context.Background(), "default", "nubes", token); err != nil {
		t.Fatal(err)
	}

	e := newExample(t, k, map[string]any{
		"cloud_provider": "nubes", "cloud_profile": "nubes-small", "vm_count": 2,
		"install_packages": true, "base_packages": []string{"coreutils"},
	})
	registry, _ := json.Marshal(map[string]any{"keeper_endpoint": k.URL, "vapp_uid": "vapp-tf", "fqdn_suffix": "nubes.test",
		"deck_api_endpoint": f.URL, "cpus": 1, "memory_gb": 1, "extra_config": map[string]string{"poll_interval": "100ms", "retry_base": "100ms"}})
	if err := os.WriteFile(filepath.Join(e.work, "nubes", "test.auto.tfvars.json"), registry, 0o644); err != nil {
		t.Fatal(err)
	}
	out := e.run(0, "-chdir=nubes", "apply", "-auto-approve")
	for _, want := range []string{`cloud_provider = "nubes"`, `cloud_profile = "nubes-small"`} {
		if !strings.Contains(out, want) {
			t.Errorf("the registry's apply lacks %q:\n%s", want, out)
		}
	}
	// What the keeper holds reads back as configured: nothing to change.
	e.run(0, "-chdir=nubes", "plan", "-detailed-exitcode")

	out = e.run(0, "apply", "-auto-approve")
	if !strings.Contains(out, `packages_status = "ok"`) {
		t.Errorf("apply output lacks packages_status ok:\n%s", out)
	}
	var hosts []string
	if err := json.Unmarshal([]byte(e.outputs()["hosts"]), &hosts); err != nil || len(hosts) != 2 ||
		!strings.HasSuffix(hosts[0], ".nubes.test") || !strings.HasSuffix(hosts[1], ".nubes.test") {
		t.Fatalf("hosts = %v, %v", hosts, err)
	}
	if n := len(f.Instances()); n != 2 {
		t.Fatalf("the fake holds %d instances, want 2", n)
	}
	for _, sid := range hosts {
		so, err := k.C.SoulGet(context.Background(), sid)
		if err != nil || so.Provider != "nubes" || so.Connection.User != "root" || so.Status != "active" {
			t.Errorf("soul %s = %+v, %v", sid, so, err)
		}
	}
	e.run(0, "plan", "-detailed-exitcode")

	e.run(0, "destroy", "-auto-approve")
	if left := f.Instances(); len(left) != 0 {
		t.Fatalf("after terraform destroy the fake holds %v", left)
	}
	if vms, err := machines.Driver.List(context.Background(), driversdk.ListRequest{Provider: machines.Provider}); err != nil || len(vms) != 0 {
		t.Fatalf("after terraform destroy the local VMs are %+v, %v", vms, err)
	}
	logs, _ := os.ReadFile(e.tfLog)
	if strings.Contains(out+string(logs)+k.Logs.String(), token) {
		t.Error("the deck-api token is in terraform's output or log, or the keeper's log")
	}
}
