package sqlstore

import (
	"encoding/json"
	"fmt"

	"github.com/soulstack/soulstack/internal/secret"
	"github.com/soulstack/soulstack/internal/store"
)

// WithSealer seals at rest, under the sealer's data key, the values under
// secret-looking keys (api_key, password, …) of a provider's config and of
// a soul seed's input: they are sealed before they are written and opened
// when they are read, so that drivers and seed runs get them in clear and
// the database, its WAL and its backups never hold them. Without it they
// are stored as given.
func WithSealer(sl *secret.Sealer) Option { return func(s *Store) { s.sealer = sl } }

// seal seals doc's secret-looking fields; what names doc in an error.
func (s *Store) seal(what string, doc json.RawMessage) (json.RawMessage, error) {
	if s.sealer == nil || len(doc) == 0 {
		return doc, nil
	}
	sealed, err := s.sealer.SealFields(doc)
	if err != nil {
		return nil, fmt.Errorf("seal %s: %w", what, err)
	}
	return sealed, nil
}

// sealSeed seals a seed's input: its secret-looking fields and the inputs
// its scenario declares secret.
func (s *Store) sealSeed(sd store.SoulSeed) (json.RawMessage, error) {
	if s.sealer == nil || len(sd.Input) == 0 {
		return sd.Input, nil
	}
	sealed, err := s.sealer.SealInput(sd.Input, sd.Secret)
	if err != nil {
		return nil, fmt.Errorf("seal the input of a seed of soul %q: %w", sd.SID, err)
	}
	return sealed, nil
}

// openSeed opens what sealSeed sealed.
func (s *Store) openSeed(sd store.SoulSeed) (json.RawMessage, error) {
	if s.sealer == nil || len(sd.Input) == 0 {
		return sd.Input, nil
	}
	opened, err := s.sealer.OpenInput(sd.Input, sd.Secret)
	if err != nil {
		return nil, fmt.Errorf("open the input of seed %d of soul %q: %w", sd.ID, sd.SID, err)
	}
	return opened, nil
}

// open opens what seal sealed.
func (s *Store) open(what string, doc json.RawMessage) (json.RawMessage, error) {
	if s.sealer == nil || len(doc) == 0 {
		return doc, nil
	}
	opened, err := s.sealer.OpenFields(doc)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", what, err)
	}
	return opened, nil
}
