package keeper_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"text/template"

	"github.com/goccy/go-yaml"

	"github.com/soulstack/soulstack/internal/keeper"
)

// TestStartAgentScript runs the onboarding userdata's start-agent.sh (the
// built-in template, rendered) under sh, its system paths moved into a
// temporary root and curl, systemctl and setsid replaced by recorders:
// with the soulstack-soul package on the image it joins and starts the
// packaged agent through the packaged unit and fetches nothing; without
// it, it fetches the keeper's agent, refuses one whose digest differs,
// and writes a unit for the one it checked.
func TestStartAgentScript(t *testing.T) {
	t.Parallel()
	agent := "#!/bin/sh\necho \"fetched $*\" >> \"$SOUL_LOG\"\n"
	sum := sha256.Sum256([]byte(agent))
	for _, tc := range []struct {
		name     string
		packaged bool
		digest   string
		fails    bool
		want     []string
	}{
		{name: "packaged", packaged: true, want: []string{
			"packaged join --retry-for 3m --host-key-dir /etc/ssh",
			"systemctl enable --now soul.service",
		}},
		{name: "fetched", digest: hex.EncodeToString(sum[:]), want: []string{
			"curl https://keeper.test:8443/v1/agent/binary",
			"fetched join --retry-for 3m --host-key-dir /etc/ssh",
			"systemctl daemon-reload",
			"systemctl enable --now soul.service",
		}},
		{name: "fetched, wrong digest", digest: strings.Repeat("0", 64), fails: true, want: []string{
			"curl https://keeper.test:8443/v1/agent/binary",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			logPath := filepath.Join(root, "calls")
			script := startAgentScript(t, map[string]any{
				"AuthorizedKey": "ssh-ed25519 AAAA", "KeeperURL": "https://keeper.test:8443", "CAFingerprint": "sha256:00", "SID": "s.test", "Token": "bt",
				"CAPEMBase64": "", "AgentURL": "https://keeper.test:8443/v1/agent/binary", "AgentSHA256": tc.digest, "StateDir": "/var/lib/soulstack", "HostKeyDir": "/etc/ssh",
			})
			// The script's system paths, inside root.
			for _, p := range []string{"/usr/bin/soul", "/lib/systemd/system/", "/etc/systemd/system/", "/run/systemd/system", "/etc/soulstack/", "/var/lib/soulstack", "/var/log/"} {
				script = strings.ReplaceAll(script, p, root+p)
			}
			for _, d := range []string{"usr/bin", "lib/systemd/system", "etc/systemd/system", "run/systemd/system", "etc/soulstack", "var/log", "stubs"} {
				if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			stub := func(path, body string) {
				if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			stub(filepath.Join(root, "stubs/systemctl"), `echo "systemctl $*" >> "$SOUL_LOG"`+"\n")
			stub(filepath.Join(root, "stubs/setsid"), `echo "setsid $*" >> "$SOUL_LOG"`+"\n")
			// curl -fsS ... -o FILE URL: writes the agent to FILE.
			stub(filepath.Join(root, "stubs/curl"), `while [ $# -gt 1 ]; do [ "$1" = -o ] && out=$2; shift; done
echo "curl $1" >> "$SOUL_LOG"
cat > "$out" <<'AGENT'
`+agent+`AGENT
`)
			if tc.packaged {
				stub(filepath.Join(root, "usr/bin/soul"), `echo "packaged $*" >> "$SOUL_LOG"`+"\n")
				if err := os.WriteFile(filepath.Join(root, "lib/systemd/system/soul.service"), []byte("[Service]\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			cmd := exec.Command("sh", "-c", script)
			cmd.Env = append(os.Environ(), "PATH="+filepath.Join(root, "stubs")+":"+os.Getenv("PATH"), "SOUL_LOG="+logPath)
			out, err := cmd.CombinedOutput()
			if (err != nil) != tc.fails {
				t.Fatalf("start-agent.sh: %v (want failure: %v)\n%s", err, tc.fails, out)
			}
			calls, _ := os.ReadFile(logPath)
			if got := strings.Split(strings.TrimSpace(string(calls)), "\n"); strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("calls:\n%s\nwant:\n%s\n(output: %s)", calls, strings.Join(tc.want, "\n"), out)
			}
			unit, err := os.ReadFile(filepath.Join(root, "etc/systemd/system/soul.service"))
			switch {
			case tc.packaged && err == nil:
				t.Fatalf("a unit was written next to the package's: %s", unit)
			case tc.name == "fetched" && !strings.Contains(string(unit), "ExecStart="+root+"/var/lib/soulstack/bin/soul run"):
				t.Fatalf("the written unit does not start the fetched agent: %q (%v)", unit, err)
			}
		})
	}
}

// startAgentScript renders the built-in userdata with data and returns
// the start-agent.sh it writes.
func startAgentScript(t *testing.T, data map[string]any) string {
	t.Helper()
	var buf bytes.Buffer
	if err := template.Must(template.New("userdata").Parse(keeper.DefaultCloudInit)).Execute(&buf, data); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		WriteFiles []struct {
			Path    string `yaml:"path"`
			Content string `yaml:"content"`
		} `yaml:"write_files"`
	}
	if err := yaml.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatalf("the userdata is not YAML: %v\n%s", err, buf.Bytes())
	}
	for _, f := range doc.WriteFiles {
		if f.Path == "/etc/soulstack/start-agent.sh" {
			return f.Content
		}
	}
	t.Fatalf("no start-agent.sh in the userdata:\n%s", buf.Bytes())
	return ""
}
