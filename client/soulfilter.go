package client

import (
	"context"
	"net/http"
)

// SoulFilter narrows GET /v1/souls; empty fields match every soul, set
// ones combine.
type SoulFilter struct {
	// Status is pending, active, unreachable or destroyed.
	Status string
	// Provider is the name of the provider that made the soul.
	Provider string
	// Label is KEY=VALUE: the soul's attribute KEY is the string VALUE.
	Label string
}

// SoulSearch returns a page of the souls that match f.
func (c *Client) SoulSearch(ctx context.Context, o ListOptions, f SoulFilter) (*SoulList, error) {
	q := o.query()
	for k, v := range map[string]string{"status": f.Status, "provider": f.Provider, "label": f.Label} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return call[SoulList](ctx, c, http.MethodGet, "/v1/souls", q, nil)
}
