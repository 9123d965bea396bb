package keeper

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"sync"

	gossh "golang.org/x/crypto/ssh"

	"github.com/soulstack/soulstack/internal/config"
	"github.com/soulstack/soulstack/internal/secret"
	"github.com/soulstack/soulstack/internal/store"
)

// projectSecrets resolves what the keeper uses on a project's behalf —
// its providers' credentials, its souls' key_refs, its SSH key — in that
// project alone: credential:NAME from the project's own registry, file:
// and env: only where keeper.yml allows and never the keeper's own
// secrets, vault: under the project's prefix. The check is made here, at
// each use, whoever wrote the reference and whenever.
type projectSecrets struct {
	resolver *secret.Resolver
	reach    secret.Reach
	config   config.Config
	store    credentialStore
	sealer   *secret.Sealer
	secrets  *secret.Keeper // told of every key and credential resolved

	mu   sync.Mutex
	keys map[string]projectKey // by project; the default project's is the keeper's own key
}

// credentialStore is what projectSecrets needs of the store.
type credentialStore interface {
	CredentialGet(ctx context.Context, project, name string) (store.Credential, error)
	ProjectSSHKeyEnsure(ctx context.Context, k store.ProjectSSHKey) (store.ProjectSSHKey, error)
}

// projectKey is a project's SSH key: the private key and its
// authorized_keys line.
type projectKey struct {
	private    []byte
	authorized string
}

// newProjectSecrets returns the resolver of c's keeper, whose own SSH key
// (the default project's) is keeperKey.
func newProjectSecrets(c config.Config, resolver *secret.Resolver, secrets *secret.Keeper, st credentialStore, sealer *secret.Sealer, keeperKey []byte) (*projectSecrets, error) {
	signer, err := gossh.ParsePrivateKey(keeperKey)
	if err != nil {
		return nil, fmt.Errorf("keeper ssh key: %w", err)
	}
	keeper := []string{c.DataDir, c.PluginDir, c.AuditCheckpointDir}
	if c.TLS.CertFile != "" {
		keeper = append(keeper, c.TLS.CertFile, c.TLS.KeyFile)
	}
	return &projectSecrets{
		resolver: resolver, secrets: secrets, config: c, store: st, sealer: sealer,
		reach: secret.Reach{Files: c.Credentials.Files, Env: c.Credentials.Env, Keeper: keeper, KeeperRefs: c.KeeperRefs(),
			VaultPrefix: func(project string) string { return c.Vault.ProjectVaultPrefix(project) }},
		keys: map[string]projectKey{store.DefaultProject: {private: keeperKey,
			authorized: strings.TrimSpace(string(gossh.MarshalAuthorizedKey(signer.PublicKey()))) + " soulstack-keeper"}},
	}, nil
}

// Resolve returns the secret ref names for an object of project. Errors
// wrap secret.ErrInvalidRef, secret.ErrOutOfReach or secret.ErrUnresolved
// and never hold the secret.
func (p *projectSecrets) Resolve(ctx context.Context, project, ref string) (string, error) {
	r, err := secret.ParseRef(ref)
	if err != nil {
		return "", err
	}
	path, err := p.reach.Check(project, r)
	if err != nil {
		return "", err
	}
	switch r.Scheme {
	case "credential":
		c, err := p.store.CredentialGet(ctx, project, r.Name)
		if errors.Is(err, store.ErrNotFound) {
			return "", fmt.Errorf("%w: project %s has no credential %q", secret.ErrUnresolved, project, r.Name)
		}
		if err != nil {
			return "", fmt.Errorf("%w: credential %q: %w", secret.ErrUnresolved, r.Name, err)
		}
		v, err := p.sealer.Open(c.Sealed)
		if err != nil {
			return "", fmt.Errorf("%w: credential %q: %w", secret.ErrUnresolved, r.Name, err)
		}
		return string(v), nil
	case "file":
		v, err := secret.Ref{Scheme: "file", Name: path}.Resolve()
		if err != nil {
			return "", fmt.Errorf("%w: %w", secret.ErrUnresolved, err)
		}
		return v, nil
	}
	return p.resolver.Resolve(ctx, ref)
}

// Provider checks that provider pr may be used as configured — an
// endpoint in its config only where keeper.yml allows one for its driver,
// since the endpoint receives the credentials and the VMs' userdata — and
// resolves its credentials in its own project (a shared provider's are its
// owner's, used, never shown).
func (p *projectSecrets) Provider(ctx context.Context, pr store.Provider) ([]byte, error) {
	if ep := endpointOf(pr.Config); ep != "" && !p.config.EndpointAllowed(pr.Driver, ep) {
		return nil, fmt.Errorf("%w: provider %q names endpoint %q, which keeper.yml's drivers.%s.endpoints does not allow", secret.ErrEndpointNotAllowed, pr.Name, ep, pr.Driver)
	}
	if pr.CredentialsRef == "" {
		return nil, nil
	}
	v, err := p.Resolve(ctx, pr.Project, pr.CredentialsRef)
	if err != nil {
		return nil, err
	}
	// A provider's credentials are masked everywhere, the plugin's log
	// included (apart from the keeper's own: a project cannot crowd those
	// out).
	p.secrets.RegisterResolved(v)
	return []byte(v), nil
}

// endpointOf is the endpoint a provider's config names, if any.
func endpointOf(config json.RawMessage) string {
	var c struct {
		Endpoint any `json:"endpoint"`
	}
	if json.Unmarshal(config, &c) != nil || c.Endpoint == nil {
		return ""
	}
	if s, ok := c.Endpoint.(string); ok {
		return s
	}
	return fmt.Sprint(c.Endpoint)
}

// SSHKey returns project's keeper SSH key: the keeper's own for the
// default project, else the project's, made on first use and kept sealed
// in the registry (keepers on one database share it).
func (p *projectSecrets) SSHKey(ctx context.Context, project string) (projectKey, error) {
	if project == "" {
		project = store.DefaultProject
	}
	p.mu.Lock()
	k, ok := p.keys[project]
	p.mu.Unlock()
	if ok {
		return k, nil
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return projectKey{}, err
	}
	block, err := gossh.MarshalPrivateKey(priv, "soulstack keeper, project "+project)
	if err != nil {
		return projectKey{}, err
	}
	sshPub, err := gossh.NewPublicKey(pub)
	if err != nil {
		return projectKey{}, err
	}
	stored, err := p.store.ProjectSSHKeyEnsure(ctx, store.ProjectSSHKey{Project: project, Sealed: p.sealer.Seal(pem.EncodeToMemory(block)),
		PublicKey: strings.TrimSpace(string(gossh.MarshalAuthorizedKey(sshPub))) + " soulstack-keeper-" + project})
	if err != nil {
		return projectKey{}, fmt.Errorf("ssh key of project %s: %w", project, err)
	}
	private, err := p.sealer.Open(stored.Sealed)
	if err != nil {
		return projectKey{}, fmt.Errorf("ssh key of project %s: %w", project, err)
	}
	p.secrets.Register(string(private))
	k = projectKey{private: private, authorized: stored.PublicKey}
	p.mu.Lock()
	p.keys[project] = k
	p.mu.Unlock()
	return k, nil
}
