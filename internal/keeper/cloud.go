package keeper

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"text/template"

	"github.com/soulstack/soulstack/driversdk"
	"github.com/soulstack/soulstack/internal/config"
	"github.com/soulstack/soulstack/internal/modules/cloud"
	"github.com/soulstack/soulstack/internal/scenario"
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
      # Join with the soul agent and start it: the soulstack-soul package's
      # agent and unit when the image has them, else the keeper's agent,
      # fetched and checked against its digest.
      set -eu
      if [ -x /usr/bin/soul ] && [ -f /lib/systemd/system/soul.service ]; then
        soul=/usr/bin/soul
      else
        bin={{ .StateDir }}/bin
        mkdir -p "$bin"
        curl -fsS --retry 10 --retry-delay 1 --retry-connrefused --cacert /etc/soulstack/ca.crt -o "$bin/soul.part" "{{ .AgentURL }}"
        echo "{{ .AgentSHA256 }}  $bin/soul.part" | sha256sum -c -
        chmod 0755 "$bin/soul.part"
        mv "$bin/soul.part" "$bin/soul"
        soul="$bin/soul"
      fi
      "$soul" join --retry-for 3m --host-key-dir {{ .HostKeyDir }}
      if [ -d /run/systemd/system ]; then
        if [ "$soul" != /usr/bin/soul ]; then
          printf '[Unit]\nDescription=Soul Stack agent\nAfter=network-online.target\n[Service]\nExecStart=%s run\nRestart=always\nKillMode=process\n[Install]\nWantedBy=multi-user.target\n' "$soul" > /etc/systemd/system/soul.service
          systemctl daemon-reload
        fi
        systemctl enable --now soul.service
      else
        setsid -f "$soul" run >>/var/log/soul.log 2>&1 </dev/null
      fi
runcmd:
  - /etc/soulstack/start-agent.sh
{{- end }}
`

// cloudSettings are the keeper's side of the cloud states: the userdata
// template and what it is rendered with, and the checks the states ask of
// the keeper. services hands them to the states (module.Provisioner).
type cloudSettings struct {
	tmpl      *template.Template
	keeperURL string
	agent     *agentSide
	// joinTemplate: the cloud_init template runs the agent's join.
	joinTemplate bool
}

func newCloudSettings(c config.Config, agent *agentSide) (*cloudSettings, error) {
	text := c.CloudInit
	if text == "" {
		text = defaultCloudInit
	}
	tmpl, err := template.New("cloud_init").Option("missingkey=error").Parse(text)
	if err != nil {
		return nil, fmt.Errorf("cloud_init: %w", err)
	}
	return &cloudSettings{
		tmpl:         tmpl,
		keeperURL:    c.KeeperURL,
		agent:        agent,
		joinTemplate: c.CloudInit == "" || strings.Contains(c.CloudInit, ".AgentURL"),
	}, nil
}

// services are the cloud states' services of this keeper.
func (k *cloudSettings) services(c config.Config, reg cloud.Registry, deploymentID string,
	drivers func(context.Context, string) (driversdk.Driver, error),
	secrets *projectSecrets) cloud.Services {
	return cloud.Services{
		Registry: reg, Driver: drivers, Credentials: secrets.Provider,
		AuthorizedKey: func(ctx context.Context, project string) (string, error) {
			key, err := secrets.SSHKey(ctx, project)
			return key.authorized, err
		}, Userdata: k.Userdata, BootstrapTTL: c.BootstrapTokenTTL.Std(), KeeperID: deploymentID,
		CheckSeed: CheckSeed, JoinsByItself: k.JoinsByItself,
	}
}

// Userdata renders the cloud_init template for one VM.
func (k *cloudSettings) Userdata(u cloud.UserdataVars) (string, error) {
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

// CheckSeed validates a seed's scenario as a run of it would be, and
// names the inputs it declares secret.
func CheckSeed(name, text string, input map[string]any) (secret, problems []string) {
	plan, err := scenario.Load(name, []byte(text), input)
	if err == nil {
		return plan.SecretInputs, nil
	}
	var se *scenario.Error
	if errors.As(err, &se) && len(se.Problems) > 0 {
		out := make([]string, len(se.Problems))
		for i, p := range se.Problems {
			out[i] = p.Pos.String() + ": " + p.Message
		}
		return nil, out
	}
	return nil, []string{name + ": " + err.Error()}
}

// JoinsByItself reports whether the userdata of a self_onboard VM of
// driver installs the agent and joins: the keeper serves a soul binary,
// advertises an agent URL for that driver, and the cloud_init template is
// the built-in one or uses .AgentURL.
func (k *cloudSettings) JoinsByItself(driver string) bool {
	return k.joinTemplate && k.agent != nil && k.agent.binary != "" && k.agent.advertised(driver) != ""
}
