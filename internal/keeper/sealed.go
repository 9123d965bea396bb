package keeper

import (
	"context"
	"fmt"

	"github.com/soulstack/soulstack/internal/secret"
	"github.com/soulstack/soulstack/internal/store"
)

// sealedStore is the registry as the keeper uses it: a provider's config
// values under secret-looking keys (api_key, password, …) are sealed under
// the data key before they are stored, like secret run inputs, and opened
// when a provider is read, so that drivers get them in clear and the
// database, its WAL and its backups never hold them. API answers mask them
// by their key names.
type sealedStore struct {
	store.Store
	sealer *secret.Sealer
}

var _ store.Translator = sealedStore{}

// TranslateError passes the question on to the store it wraps.
func (s sealedStore) TranslateError(err error) error {
	if t, ok := s.Store.(store.Translator); ok {
		return t.TranslateError(err)
	}
	return err
}

// ProviderCreate seals the provider's secret config values and stores it.
func (s sealedStore) ProviderCreate(ctx context.Context, p store.ProviderCreateParams) (store.Provider, error) {
	if len(p.Provider.Config) > 0 {
		sealed, err := s.sealer.SealFields(p.Provider.Config)
		if err != nil {
			return store.Provider{}, fmt.Errorf("seal config of provider %q: %w", p.Provider.Name, err)
		}
		p.Provider.Config = sealed
	}
	return s.open(s.Store.ProviderCreate(ctx, p))
}

// ProviderGet returns the provider with its config opened.
func (s sealedStore) ProviderGet(ctx context.Context, name string) (store.Provider, error) {
	return s.open(s.Store.ProviderGet(ctx, name))
}

// ProviderList lists providers with their configs opened.
func (s sealedStore) ProviderList(ctx context.Context, p store.ListParams) ([]store.Provider, error) {
	ps, err := s.Store.ProviderList(ctx, p)
	if err != nil {
		return nil, err
	}
	for i := range ps {
		if ps[i], err = s.open(ps[i], nil); err != nil {
			return nil, err
		}
	}
	return ps, nil
}

func (s sealedStore) open(p store.Provider, err error) (store.Provider, error) {
	if err != nil || len(p.Config) == 0 {
		return p, err
	}
	opened, err := s.sealer.OpenFields(p.Config)
	if err != nil {
		return store.Provider{}, fmt.Errorf("open config of provider %q: %w", p.Name, err)
	}
	p.Config = opened
	return p, nil
}
