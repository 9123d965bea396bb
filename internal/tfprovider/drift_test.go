package tfprovider_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/sshtest"
)

// TestDetectDriftWithTerraform: a soulstack_run with detect_drift = true
// is checked on every refresh. With a real terraform against a keeper and
// an sshd host: after the apply, plan finds nothing to do (exit 0); once
// the file the run wrote is edited on the host, plan shows the run
// replaced (exit 2) — software drift where Terraform users look for drift
// — and the refresh's check changed nothing; the apply runs it again and
// the next plan is clean.
func TestDetectDriftWithTerraform(t *testing.T) {
	t.Parallel()
	bin := terraformBin(t)
	k := startKeeper(t)
	srv := sshtest.Start(t, sshtest.Options{})
	tmp := t.TempDir()
	key := filepath.Join(tmp, "id")
	if err := os.WriteFile(key, srv.ClientKey, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := k.C.SoulCreate(context.Background(), client.SoulCreate{SID: "web-1.tf.test", Address: srv.Addr,
		Connection: client.Connection{Transport: "ssh", User: srv.User, Port: srv.Port, KeyRef: "file:" + key}}); err != nil {
		t.Fatal(err)
	}
	pluginDir := filepath.Join(tmp, "plugins")
	if out, err := exec.Command("go", "build", "-o", filepath.Join(pluginDir, "terraform-provider-soulstack"), "../../cmd/terraform-provider-soulstack").CombinedOutput(); err != nil {
		t.Fatalf("build provider: %v\n%s", err, out)
	}
	rc := filepath.Join(tmp, "dev.tfrc")
	if err := os.WriteFile(rc, []byte("provider_installation {\n  dev_overrides {\n    \"soulstack/soulstack\" = \""+pluginDir+"\"\n  }\n  direct {}\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(tmp, "work")
	motd := filepath.Join(tmp, "motd")
	main := `terraform {
  required_providers {
    soulstack = { source = "soulstack/soulstack" }
  }
}
provider "soulstack" {
  endpoint = "` + k.URL + `"
}
resource "soulstack_run" "motd" {
  detect_drift = true
  scenario     = <<-EOT
    steps:
      - name: motd
        on: web-1.tf.test
        module: core.file.present
        params: {path: "` + motd + `", content: "managed by terraform\n"}
  EOT
}
`
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "main.tf"), []byte(main), 0o644); err != nil {
		t.Fatal(err)
	}
	e := &example{t: t, bin: bin, work: work, env: []string{"TF_CLI_CONFIG_FILE=" + rc, "TF_IN_AUTOMATION=1", "CHECKPOINT_DISABLE=1", "HOME=" + tmp,
		"SOULSTACK_TOKEN=" + k.Token, "PATH=" + os.Getenv("PATH")}}

	e.run(0, "apply", "-auto-approve")
	if b, err := os.ReadFile(motd); err != nil || string(b) != "managed by terraform\n" {
		t.Fatalf("after apply: %q, %v", b, err)
	}
	out := e.run(0, "plan", "-detailed-exitcode")
	if !strings.Contains(out, "No changes") {
		t.Fatalf("plan after apply:\n%s", out)
	}
	if err := os.WriteFile(motd, []byte("edited by hand\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out = e.run(2, "plan", "-detailed-exitcode")
	if !strings.Contains(out, "must be replaced") || !strings.Contains(out, "The souls no longer carry what this run made") {
		t.Fatalf("plan after the host was edited:\n%s", out)
	}
	if b, _ := os.ReadFile(motd); string(b) != "edited by hand\n" {
		t.Fatalf("the refresh's check wrote the file: %q", b)
	}
	e.run(0, "apply", "-auto-approve")
	if b, _ := os.ReadFile(motd); string(b) != "managed by terraform\n" {
		t.Fatalf("after the second apply: %q", b)
	}
	e.run(0, "plan", "-detailed-exitcode")
}
