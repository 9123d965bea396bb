package keeper

import (
	"context"
	"fmt"

	"github.com/soulstack/soulstack/internal/secret"
	"github.com/soulstack/soulstack/internal/store"
)

// sealedStore is the registry as the keeper uses it: the values under
// secret-looking keys (api_key, password, …) of a provider's config and of
// a soul seed's input are sealed under the data key before they are
// stored, like secret run inputs, and opened when they are read, so that
// drivers and seed runs get them in clear and the
// database, its WAL and its backups never hold them. API answers mask them
// by their key names.
type sealedStore struct {
	store.Store
	sealer *secret.Sealer
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

// SeedAdd seals the seed's secret-looking input values, like a
// provider's config.
func (s sealedStore) SeedAdd(ctx context.Context, p store.SeedAddParams) (store.SoulSeed, error) {
	var err error
	if p.Seed.Input, err = s.sealSeed(p.Seed.Input); err != nil {
		return store.SoulSeed{}, err
	}
	sd, err := s.Store.SeedAdd(ctx, p)
	if err != nil {
		return sd, err
	}
	return s.openSeed(sd)
}

// CloudProvision seals the secret-looking input values of the seeds it
// stores.
func (s sealedStore) CloudProvision(ctx context.Context, p store.CloudProvisionParams) error {
	seeds := make([]store.SoulSeed, len(p.Seeds))
	for i, sd := range p.Seeds {
		var err error
		if sd.Input, err = s.sealSeed(sd.Input); err != nil {
			return err
		}
		seeds[i] = sd
	}
	p.Seeds = seeds
	return s.Store.CloudProvision(ctx, p)
}

// Seeds lists a soul's seeds with their inputs opened.
func (s sealedStore) Seeds(ctx context.Context, sid string) ([]store.SoulSeed, error) {
	seeds, err := s.Store.Seeds(ctx, sid)
	if err != nil {
		return nil, err
	}
	for i := range seeds {
		if seeds[i], err = s.openSeed(seeds[i]); err != nil {
			return nil, err
		}
	}
	return seeds, nil
}

func (s sealedStore) sealSeed(input []byte) ([]byte, error) {
	if len(input) == 0 {
		return input, nil
	}
	sealed, err := s.sealer.SealFields(input)
	if err != nil {
		return nil, fmt.Errorf("seal seed input: %w", err)
	}
	return sealed, nil
}

func (s sealedStore) openSeed(sd store.SoulSeed) (store.SoulSeed, error) {
	if len(sd.Input) == 0 {
		return sd, nil
	}
	opened, err := s.sealer.OpenFields(sd.Input)
	if err != nil {
		return sd, fmt.Errorf("open input of seed %d of soul %q: %w", sd.ID, sd.SID, err)
	}
	sd.Input = opened
	return sd, nil
}
