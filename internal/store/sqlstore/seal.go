package sqlstore

import (
	"encoding/json"
	"fmt"

	"github.com/soulstack/soulstack/internal/secret"
)

// WithSealer seals at rest, under the sealer's data key, the values under
// secret-looking keys (api_key, password, …) of a provider's config and of
// a soul seed's input: they are sealed before they are written and opened
// when they are read, so that drivers and seed runs get them in clear and
// the database, its WAL and its backups never hold them. Without it they
// are stored as given.
func WithSealer(sl *secret.Sealer) Option { return func(s *Store) { s.sealer = sl } }

// seal seals doc's secret-looking fields and its top-level values under
// names (a seed's inputs its scenario declares secret); what names doc in
// an error.
func (s *Store) seal(what string, doc json.RawMessage, names []string) (json.RawMessage, error) {
	if s.sealer == nil || len(doc) == 0 {
		return doc, nil
	}
	sealed, err := s.sealer.SealInput(doc, names)
	if err != nil {
		return nil, fmt.Errorf("seal %s: %w", what, err)
	}
	return sealed, nil
}

// open opens what seal sealed with the same names.
func (s *Store) open(what string, doc json.RawMessage, names []string) (json.RawMessage, error) {
	if s.sealer == nil || len(doc) == 0 {
		return doc, nil
	}
	opened, err := s.sealer.OpenInput(doc, names)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", what, err)
	}
	return opened, nil
}
