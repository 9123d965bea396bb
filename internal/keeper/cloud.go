package keeper

import (
	"bytes"
	"context"
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
      {"keeper": "{{ .KeeperURL }}", "sid": "{{ .SID }}", "token": "{{ .Token }}"}
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
}

var (
	_ cloud.Host    = (*keeperTarget)(nil)
	_ module.Target = (*keeperTarget)(nil)
)

func newKeeperTarget(c config.Config, st store.Store, files string, sshKey []byte,
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

// Userdata renders the cloud_init template for one VM.
func (k *keeperTarget) Userdata(u cloud.UserdataVars) (string, error) {
	host, _, _ := strings.Cut(u.SID, ".")
	var b bytes.Buffer
	err := k.tmpl.Execute(&b, map[string]any{
		"SID": u.SID, "Hostname": host, "Index": u.Index, "Token": u.Token,
		"AuthorizedKey": u.AuthorizedKey, "KeeperURL": k.keeperURL,
	})
	return b.String(), err
}
