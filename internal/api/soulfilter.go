package api

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/secret"
	"github.com/soulstack/soulstack/internal/store"
)

// soulListInput is the query of GET /v1/souls: a page and its filters.
type soulListInput struct {
	ListInput
	Status   string `query:"status" enum:"pending,active,unreachable,destroyed" doc:"Only souls in this status."`
	Provider string `query:"provider" maxLength:"63" doc:"Only souls made by this provider."`
	Label    string `query:"label" maxLength:"1200" doc:"Only souls whose attribute KEY is the string VALUE, written KEY=VALUE (the whole value, no wildcards). A secret-looking KEY (masked in responses) or a VALUE holding a token is refused: soul.label_secret."`
}

// Limits of a label filter's key and value.
const (
	maxLabelKey   = 128
	maxLabelValue = 1024
)

// params validates the filters and returns the store's query.
func (in *soulListInput) params(secrets *secret.Keeper) (store.SoulListParams, error) {
	p := store.SoulListParams{ListParams: store.ListParams{Limit: in.Limit + 1, After: in.After}, Status: in.Status, Provider: in.Provider}
	if in.Provider != "" {
		if prob := checkName("query.provider", in.Provider); prob != nil {
			return p, prob
		}
	}
	if in.Label != "" {
		l, prob := parseLabel("query.label", in.Label, secrets)
		if prob != nil {
			return p, prob
		}
		p.Label = l
	}
	return p, nil
}

// parseLabel reads KEY=VALUE: the key is 1 to 128 characters without '='
// or spaces, the value at most 1024 characters; neither holds control
// characters, and neither is a secret (soul.label_secret).
func parseLabel(location, s string, secrets *secret.Keeper) (*store.Label, *client.Problem) {
	key, value, ok := strings.Cut(s, "=")
	switch {
	case !ok:
		return nil, invalid("soul.label_invalid", location, "must be KEY=VALUE (an attribute and its value)")
	case key == "":
		return nil, invalid("soul.label_invalid", location, "the attribute key before '=' must not be empty")
	case len(key) > maxLabelKey:
		return nil, invalid("soul.label_invalid", location, "the attribute key is %d bytes long; at most %d are allowed", len(key), maxLabelKey)
	case len(value) > maxLabelValue:
		return nil, invalid("soul.label_invalid", location, "the value is %d bytes long; at most %d are allowed", len(value), maxLabelValue)
	case !utf8.ValidString(s):
		return nil, invalid("soul.label_invalid", location, "is not valid UTF-8")
	}
	if i := strings.IndexFunc(key, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }); i >= 0 {
		return nil, invalid("soul.label_invalid", location, "the attribute key has a space or control character at byte %d", i)
	}
	if i := strings.IndexFunc(value, unicode.IsControl); i >= 0 {
		return nil, invalid("soul.label_invalid", location, "the value has a control character at byte %d", i+len(key)+1)
	}
	// A masked attribute must not become an oracle: matching on it would
	// confirm a guessed secret that responses show as "***". A value the
	// masking would hide (a token, a keeper secret) is refused the same
	// way, and neither is echoed.
	if secret.IsSensitiveKey(key) {
		return nil, invalid("soul.label_secret", location, "attribute %q is secret-looking and masked in responses: souls cannot be filtered by it", key)
	}
	if secrets.MaskString(key) != key || secrets.MaskString(value) != value {
		return nil, invalid("soul.label_secret", location, "the label holds a secret (a token or a keeper secret): souls cannot be filtered by it")
	}
	return &store.Label{Key: key, Value: value}, nil
}
