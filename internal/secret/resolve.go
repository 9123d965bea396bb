package secret

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	vault "github.com/hashicorp/vault/api"
)

// ErrUnresolved is wrapped by every error of Resolver.Resolve for a
// well-formed reference whose secret could not be had: an unset variable,
// an unreadable file, a Vault path or field that does not exist, Vault
// unreachable or refusing the token.
var ErrUnresolved = errors.New("credentials reference could not be resolved")

// ResolverOptions configures a Resolver. Only vault: references need them.
type ResolverOptions struct {
	// VaultAddress is the address of the Vault (or OpenBao) server, such as
	// https://vault.example.com:8200 (keeper.yml vault.address).
	VaultAddress string
	// VaultTokenRef names the token the keeper reads Vault with, as an env:
	// or file: reference (keeper.yml vault.token_ref). It is resolved on
	// every vault: lookup, so a rotated token file is picked up.
	VaultTokenRef string
	// VaultTimeout bounds one Vault read. Default 10 s.
	VaultTimeout time.Duration
	// Secrets is told of the Vault token the resolver reads with (the
	// keeper's own, masked everywhere); nil: nobody.
	Secrets *Keeper
	// HTTPClient is used for Vault; nil: vault/api's default client, which
	// honours VAULT_CACERT and the other TLS variables of the environment.
	HTTPClient *http.Client
}

// Resolver turns credentials references (env:NAME, file:/path,
// vault:<path>#<field>) into the secrets they name, at the moment they are
// needed. It registers no value it returns: the caller masks it where it
// belongs — a provider's credentials with Register (the keeper's own, masked
// everywhere, plugin logs included), a soul's key in the run's Set — hands
// it on in memory and never stores it. The Vault token it reads is the
// keeper's and is registered. A Resolver is safe for concurrent use.
type Resolver struct {
	opts     ResolverOptions
	tokenRef Ref
	vault    *vault.Client // nil without VaultAddress
}

// NewResolver returns a Resolver. Without a VaultAddress it resolves env:
// and file: references and refuses vault: ones with a clear error.
func NewResolver(opts ResolverOptions) (*Resolver, error) {
	if opts.VaultTimeout == 0 {
		opts.VaultTimeout = 10 * time.Second
	}
	r := &Resolver{opts: opts}
	if opts.VaultAddress == "" {
		return r, nil
	}
	u, err := url.Parse(opts.VaultAddress)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("vault address %q: want http(s)://host[:port]", opts.VaultAddress)
	}
	if opts.VaultTokenRef == "" {
		return nil, errors.New("vault token_ref is required with a vault address")
	}
	ref, err := ParseRef(opts.VaultTokenRef)
	if err != nil {
		return nil, fmt.Errorf("vault token_ref: %w", err)
	}
	if ref.Scheme == "vault" {
		return nil, fmt.Errorf("vault token_ref: %w: the Vault token cannot itself come from Vault; use env: or file:", ErrInvalidRef)
	}
	r.tokenRef = ref

	cfg := vault.DefaultConfig()
	if cfg.Error != nil {
		return nil, fmt.Errorf("vault client: %w", cfg.Error)
	}
	cfg.Address = opts.VaultAddress
	cfg.Timeout = opts.VaultTimeout
	cfg.MaxRetries = 2
	cfg.MinRetryWait = 200 * time.Millisecond
	cfg.MaxRetryWait = time.Second
	if opts.HTTPClient != nil {
		cfg.HttpClient = opts.HTTPClient
	}
	c, err := vault.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("vault client: %w", err)
	}
	// Not VAULT_TOKEN or VAULT_NAMESPACE from the environment: only what
	// the keeper was configured with.
	c.ClearToken()
	c.ClearNamespace()
	r.vault = c
	return r, nil
}

// Resolve returns the secret ref names (the caller registers it). An
// env: value is used as is; a file's content loses its trailing newlines;
// a vault: reference reads the path through Vault's HTTP API (a KV version
// 2 path includes its data/ segment, as in vault:secret/data/cloud#api_key)
// and takes the field: a string as is, any other value as its JSON.
// A malformed reference is an error wrapping ErrInvalidRef; a secret that
// cannot be had, one wrapping ErrUnresolved. Errors never contain the
// secret or the Vault token.
func (r *Resolver) Resolve(ctx context.Context, ref string) (string, error) {
	parsed, err := ParseRef(ref)
	if err != nil {
		return "", err
	}
	if parsed.Scheme != "vault" {
		v, err := parsed.Resolve()
		if err != nil {
			return "", fmt.Errorf("%w: %w", ErrUnresolved, err)
		}
		return v, nil
	}
	v, err := r.readVault(ctx, parsed)
	if err != nil {
		return "", fmt.Errorf("%w: resolve %s: %w", ErrUnresolved, parsed, err)
	}
	return v, nil
}

// readVault reads ref's field from Vault.
func (r *Resolver) readVault(ctx context.Context, ref Ref) (string, error) {
	if r.vault == nil {
		return "", errors.New("no Vault server is configured (keeper.yml vault.address)")
	}
	token, err := r.tokenRef.Resolve()
	if err != nil {
		return "", fmt.Errorf("vault token: %w", err)
	}
	r.opts.Secrets.Register(token) // the keeper's own: masked everywhere
	r.vault.SetToken(token)
	s, err := r.vault.Logical().ReadWithContext(ctx, ref.Name)
	if err != nil {
		var re *vault.ResponseError
		if errors.As(err, &re) {
			return "", fmt.Errorf("vault answered %d for %s: %v", re.StatusCode, ref.Name, re.Errors)
		}
		return "", fmt.Errorf("read %s: %w", ref.Name, err)
	}
	if s == nil || s.Data == nil {
		return "", fmt.Errorf("no secret at %s", ref.Name)
	}
	data := s.Data
	// A KV version 2 read wraps the secret's fields in "data", beside
	// "metadata".
	if inner, ok := data["data"].(map[string]any); ok {
		if _, ok := data["metadata"]; ok {
			data = inner
		}
	}
	val, ok := data[ref.Field]
	if !ok || val == nil {
		return "", fmt.Errorf("the secret at %s has no field %q", ref.Name, ref.Field)
	}
	if str, ok := val.(string); ok {
		return str, nil
	}
	b, err := json.Marshal(val)
	if err != nil {
		return "", fmt.Errorf("field %q of %s: %w", ref.Field, ref.Name, err)
	}
	return string(b), nil
}
