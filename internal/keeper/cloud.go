package keeper

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"text/template"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/soulstack/soulstack/driversdk"
	"github.com/soulstack/soulstack/internal/config"
	"github.com/soulstack/soulstack/internal/engine"
	"github.com/soulstack/soulstack/internal/module"
	"github.com/soulstack/soulstack/internal/modules/cloud"
	"github.com/soulstack/soulstack/internal/scenario"
	"github.com/soulstack/soulstack/internal/store"
)

// defaultCloudInit is the userdata template when keeper.yml sets none: it
// authorizes the keeper's key and leaves the soul's identity and one-time
// bootstrap token for the agent.
const defaultCloudInit = `#cloud-config
ssh_authorized_keys:
  - {{ .AuthorizedKey }}
write_files:
  - path: /etc/soulstack/bootstrap.json
    permissions: "0600"
    content: |
      {"keeper": "{{ .KeeperURL }}", "ca_fingerprint": "{{ .CAFingerprint }}", "sid": "{{ .SID }}", "token": "{{ .Token }}"}
{{- if .AgentURL }}
  - path: /etc/soulstack/ca.crt
    permissions: "0644"
    encoding: b64
    content: {{ .CAPEMBase64 }}
  - path: /etc/soulstack/start-agent.sh
    permissions: "0755"
    content: |
      #!/bin/sh
      # Fetch the soul agent from the keeper, join, and start it.
      set -eu
      bin={{ .StateDir }}/bin
      mkdir -p "$bin"
      curl -fsS --retry 10 --retry-delay 1 --retry-connrefused --cacert /etc/soulstack/ca.crt -o "$bin/soul.part" "{{ .AgentURL }}"
      echo "{{ .AgentSHA256 }}  $bin/soul.part" | sha256sum -c -
      chmod 0755 "$bin/soul.part"
      mv "$bin/soul.part" "$bin/soul"
      "$bin/soul" join --retry-for 3m --host-key-dir {{ .HostKeyDir }}
      if [ -d /run/systemd/system ]; then
        printf '[Unit]\nDescription=Soul Stack agent\nAfter=network-online.target\n[Service]\nExecStart=%s run\nRestart=always\n[Install]\nWantedBy=multi-user.target\n' "$bin/soul" > /etc/systemd/system/soul.service
        systemctl daemon-reload
        systemctl enable --now soul.service
      else
        setsid -f "$bin/soul" run >>/var/log/soul.log 2>&1 </dev/null
      fi
runcmd:
  - /etc/soulstack/start-agent.sh
{{- end }}
`

// keeperTarget is the target of keeper-side steps: it runs no commands,
// reads the keeper's files, and gives the cloud states what they need.
type keeperTarget struct {
	engine.KeeperTarget
	st        store.Store
	drivers   func(ctx context.Context, name string) (driversdk.Driver, error)
	resolve   func(ctx context.Context, ref string) ([]byte, error)
	pubKey    string
	tmpl      *template.Template
	ttl       time.Duration
	keeperURL string
	keeperID  string // the deployment id, store.DeploymentID
	agent     *agentSide
	// joinTemplate: the cloud_init template runs the agent's join.
	joinTemplate bool
}

var (
	_ cloud.Host    = (*keeperTarget)(nil)
	_ module.Target = (*keeperTarget)(nil)
)

func newKeeperTarget(c config.Config, st store.Store, keeperID, files string, sshKey []byte, agent *agentSide,
	drivers func(context.Context, string) (driversdk.Driver, error),
	resolve func(context.Context, string) ([]byte, error)) (*keeperTarget, error) {
	signer, err := gossh.ParsePrivateKey(sshKey)
	if err != nil {
		return nil, fmt.Errorf("keeper ssh key: %w", err)
	}
	text := c.CloudInit
	if text == "" {
		text = defaultCloudInit
	}
	tmpl, err := template.New("cloud_init").Option("missingkey=error").Parse(text)
	if err != nil {
		return nil, fmt.Errorf("cloud_init: %w", err)
	}
	ttl, err := time.ParseDuration(c.BootstrapTokenTTL)
	if err != nil {
		return nil, fmt.Errorf("bootstrap_token_ttl: %w", err)
	}
	return &keeperTarget{
		KeeperTarget: engine.KeeperTarget{KeeperFiles: engine.KeeperFiles(files)},
		st:           st, drivers: drivers, resolve: resolve,
		pubKey:    strings.TrimSpace(string(gossh.MarshalAuthorizedKey(signer.PublicKey()))) + " soulstack-keeper",
		tmpl:      tmpl,
		ttl:       ttl,
		keeperURL: c.KeeperURL,
		keeperID:  keeperID,
		agent:     agent,

		joinTemplate: c.CloudInit == "" || strings.Contains(c.CloudInit, ".AgentURL"),
	}, nil
}

func (k *keeperTarget) Registry() cloud.Registry { return k.st }

func (k *keeperTarget) Driver(ctx context.Context, name string) (driversdk.Driver, error) {
	return k.drivers(ctx, name)
}

func (k *keeperTarget) Credentials(ctx context.Context, ref string) ([]byte, error) {
	return k.resolve(ctx, ref)
}

func (k *keeperTarget) AuthorizedKey() string       { return k.pubKey }
func (k *keeperTarget) BootstrapTTL() time.Duration { return k.ttl }
func (k *keeperTarget) KeeperID() string            { return k.keeperID }

// Userdata renders the cloud_init template for one VM.
func (k *keeperTarget) Userdata(u cloud.UserdataVars) (string, error) {
	host, _, _ := strings.Cut(u.SID, ".")
	var b bytes.Buffer
	vars := k.agent.userdataVars(u.Driver)
	for key, v := range map[string]any{
		"SID": u.SID, "Hostname": host, "Index": u.Index, "Token": u.Token,
		"AuthorizedKey": u.AuthorizedKey, "KeeperURL": k.keeperURL,
	} {
		vars[key] = v
	}
	if adv := k.agent.advertised(u.Driver); adv != "" {
		vars["KeeperURL"] = adv
	}
	err := k.tmpl.Execute(&b, vars)
	return b.String(), err
}

var _ cloud.SeedChecker = (*keeperTarget)(nil)

// CheckSeed validates a seed's scenario as a run of it would be.
func (k *keeperTarget) CheckSeed(name, text string, input map[string]any) []string {
	_, err := scenario.Load(name, []byte(text), input)
	if err == nil {
		return nil
	}
	var se *scenario.Error
	if errors.As(err, &se) && len(se.Problems) > 0 {
		out := make([]string, len(se.Problems))
		for i, p := range se.Problems {
			out[i] = p.Pos.String() + ": " + p.Message
		}
		return out
	}
	return []string{name + ": " + err.Error()}
}

var _ cloud.SelfJoiner = (*keeperTarget)(nil)

// JoinsByItself reports whether the userdata of a self_onboard VM of
// driver installs the agent and joins: the keeper serves a soul binary,
// advertises an agent URL for that driver, and the cloud_init template is
// the built-in one or uses .AgentURL.
func (k *keeperTarget) JoinsByItself(driver string) bool {
	return k.joinTemplate && k.agent != nil && k.agent.binary != "" && k.agent.advertised(driver) != ""
}
