package tfprovider_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/soulstack/soulstack/internal/scenario"
	"github.com/soulstack/soulstack/internal/sshtest"
)

// TestExampleWithTerraform runs examples/terraform end to end with a real
// terraform or tofu binary, through a dev_overrides CLI config, against a
// keeper and an sshd registered as the existing host. It installs an
// already-installed package, so it changes nothing on this machine.
func TestExampleWithTerraform(t *testing.T) {
	t.Parallel()
	bin := ""
	for _, name := range []string{"terraform", "tofu"} {
		if p, err := exec.LookPath(name); err == nil {
			bin = p
			break
		}
	}
	if bin == "" {
		t.Log("skipping: neither terraform nor tofu is on PATH (the protocol-level tests cover the provider)")
		t.Skip("neither terraform nor tofu is on PATH")
	}
	if testing.Short() {
		t.Skip("-short: skipping the terraform run")
	}
	k := startKeeper(t)
	s := sshtest.Start(t, sshtest.Options{})
	tmp := t.TempDir()
	keyFile := filepath.Join(tmp, "id_ed25519")
	if err := os.WriteFile(keyFile, s.ClientKey, 0o600); err != nil {
		t.Fatal(err)
	}

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
	const pgPassword = "pg-Secret-4b1c-never-shown"
	vars := map[string]any{
		"keeper_endpoint":  k.URL,
		"install_packages": true,
		"base_packages":    []string{"coreutils"},
		"pg_db_password":   pgPassword,
		"existing_host": map[string]any{
			"sid": "vm-1.example.test", "address": s.Addr, "user": s.User, "port": s.Port, "key_ref": "file:" + keyFile,
		},
	}
	b, _ := json.Marshal(vars)
	if err := os.WriteFile(filepath.Join(work, "test.auto.tfvars.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
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
	if err := os.WriteFile(filepath.Join(work, "secret_echo.tf"), []byte(extra), 0o644); err != nil {
		t.Fatal(err)
	}
	tfLog := filepath.Join(tmp, "terraform.log")
	env := []string{"TF_CLI_CONFIG_FILE=" + cliConfig, "TF_IN_AUTOMATION=1", "TF_LOG=trace", "TF_LOG_PATH=" + tfLog,
		"TF_VAR_keeper_token=" + k.Token, "CHECKPOINT_DISABLE=1", "HOME=" + tmp}
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "TF_") && !strings.HasPrefix(e, "SOULSTACK_") && !strings.HasPrefix(e, "HOME=") {
			env = append(env, e)
		}
	}
	run := func(wantCode int, args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, append(args, "-no-color", "-input=false")...)
		cmd.Dir, cmd.Env = work, env
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != wantCode {
			t.Fatalf("%s %s: exit %d, want %d\n%s", filepath.Base(bin), strings.Join(args, " "), code, wantCode, out)
		}
		return string(out)
	}

	out := run(0, "apply", "-auto-approve")
	for _, want := range []string{"***", "(sensitive value)", `packages_status = "ok"`, `docker_status = "skipped"`, `postgres_status = "skipped"`, "vm-1.example.test"} {
		if !strings.Contains(out, want) {
			t.Errorf("apply output lacks %q:\n%s", want, out)
		}
	}
	runs := k.runCount(t)
	if runs != 2 {
		t.Errorf("runs after apply: %d, want 2", runs)
	}
	// Nothing changed: plan says so (exit 0 with -detailed-exitcode).
	out += run(0, "plan", "-detailed-exitcode")
	// Bumping install_run_id runs the installs once more.
	out += run(0, "apply", "-auto-approve", "-var", "install_run_id=2")
	if n := k.runCount(t); n != runs+1 {
		t.Errorf("runs after bumping install_run_id: %d, want %d", n, runs+1)
	}
	out += run(0, "destroy", "-auto-approve", "-var", "install_run_id=2")

	logData, _ := os.ReadFile(tfLog)
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
