// Package client is the typed Go client of the keeper's Operator REST API
// and the API's wire types, including the one vocabulary of runs (phases,
// step and target statuses, event kinds and their data: events.go) that the
// keeper emits and every reader decodes. soulctl, the Terraform provider,
// the keeper's MCP server and tests use it; it imports nothing from the
// server.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// DefaultURL is where a keeper listens unless told otherwise.
const DefaultURL = "http://127.0.0.1:8420"

// Client talks to one keeper with one API token.
type Client struct {
	base  *url.URL
	token string
	http  *http.Client
}

// New returns a client for the keeper at baseURL (e.g.
// http://127.0.0.1:8420) authenticating with token. An https:// keeper must
// present a certificate the system trusts; NewWithOptions takes the
// keeper's own CA.
func New(baseURL, token string) (*Client, error) {
	return NewWithOptions(baseURL, token, Options{})
}

// NewWithOptions is New with the trust settings of o.
func NewWithOptions(baseURL, token string, o Options) (*Client, error) {
	if baseURL == "" {
		baseURL = DefaultURL
	}
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("keeper URL %q: want http(s)://host:port", baseURL)
	}
	hc, err := o.httpClient()
	if err != nil {
		return nil, err
	}
	return &Client{base: u, token: token, http: hc}, nil
}

// ListOptions pages through a list: at most Limit items after the cursor
// After (the previous page's Next).
type ListOptions struct {
	Limit int
	After string
}

func (o ListOptions) query() url.Values {
	q := url.Values{}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.After != "" {
		q.Set("after", o.After)
	}
	return q
}

// do sends a request and decodes a JSON answer into out (if not nil). A
// non-2xx answer is returned as *Problem.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, in, out any) error {
	_, err := c.doStatus(ctx, method, path, q, in, out)
	return err
}

// doStatus is do that also returns the HTTP status of a successful answer.
func (c *Client) doStatus(ctx context.Context, method, path string, q url.Values, in, out any) (int, error) {
	u := *c.base
	u.Path += path
	u.RawQuery = q.Encode()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, fmt.Errorf("encode request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return 0, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if ce := c.certificateError(err); ce != err {
			return 0, ce
		}
		return 0, fmt.Errorf("keeper at %s: %w", c.base, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return 0, fmt.Errorf("read answer: %w", err)
	}
	if resp.StatusCode >= 300 {
		p := &Problem{}
		if json.Unmarshal(data, p) != nil || p.Code == "" {
			p = &Problem{Status: resp.StatusCode, Title: http.StatusText(resp.StatusCode), Code: "http." + strconv.Itoa(resp.StatusCode), Detail: strings.TrimSpace(string(data))}
		}
		if p.Status == 0 {
			p.Status = resp.StatusCode
		}
		return resp.StatusCode, p
	}
	if out == nil || len(data) == 0 {
		return resp.StatusCode, nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return resp.StatusCode, fmt.Errorf("decode answer of %s %s: %w", method, path, err)
	}
	return resp.StatusCode, nil
}

// call sends a request and decodes the answer into a new T.
// allPages reads a paged list whole: page after page of up to 1,000 items
// (q's other parameters on each), following next until the last.
func allPages[L, T any](ctx context.Context, c *Client, path string, q url.Values, page func(*L) ([]T, string)) ([]T, error) {
	if q == nil {
		q = url.Values{}
	}
	q.Set("limit", "1000")
	items := []T{}
	for {
		l, err := call[L](ctx, c, http.MethodGet, path, q, nil)
		if err != nil {
			return nil, err
		}
		got, next := page(l)
		items = append(items, got...)
		if next == "" {
			return items, nil
		}
		q.Set("after", next)
	}
}

func call[T any](ctx context.Context, c *Client, method, path string, q url.Values, in any) (*T, error) {
	var out T
	if err := c.do(ctx, method, path, q, in, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

func esc(s string) string { return url.PathEscape(s) }

// ProviderCreate registers a provider.
func (c *Client) ProviderCreate(ctx context.Context, in ProviderCreate) (*Provider, error) {
	return call[Provider](ctx, c, http.MethodPost, "/v1/providers", nil, in)
}

// ProviderGet returns one provider.
func (c *Client) ProviderGet(ctx context.Context, name string) (*Provider, error) {
	return call[Provider](ctx, c, http.MethodGet, "/v1/providers/"+esc(name), nil, nil)
}

// ProviderList returns a page of providers.
func (c *Client) ProviderList(ctx context.Context, o ListOptions) (*ProviderList, error) {
	return call[ProviderList](ctx, c, http.MethodGet, "/v1/providers", o.query(), nil)
}

// ProviderDelete deletes a provider that no profile uses.
func (c *Client) ProviderDelete(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/v1/providers/"+esc(name), nil, nil, nil)
}

// ProfileCreate registers a profile.
func (c *Client) ProfileCreate(ctx context.Context, in ProfileCreate) (*Profile, error) {
	return call[Profile](ctx, c, http.MethodPost, "/v1/profiles", nil, in)
}

// ProfileGet returns one profile.
func (c *Client) ProfileGet(ctx context.Context, name string) (*Profile, error) {
	return call[Profile](ctx, c, http.MethodGet, "/v1/profiles/"+esc(name), nil, nil)
}

// ProfileList returns a page of profiles.
func (c *Client) ProfileList(ctx context.Context, o ListOptions) (*ProfileList, error) {
	return call[ProfileList](ctx, c, http.MethodGet, "/v1/profiles", o.query(), nil)
}

// ProfileDelete deletes a profile.
func (c *Client) ProfileDelete(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/v1/profiles/"+esc(name), nil, nil, nil)
}

// SoulCreate registers an existing host.
func (c *Client) SoulCreate(ctx context.Context, in SoulCreate) (*Soul, error) {
	return call[Soul](ctx, c, http.MethodPost, "/v1/souls", nil, in)
}

// SoulGet returns one soul.
func (c *Client) SoulGet(ctx context.Context, sid string) (*Soul, error) {
	return call[Soul](ctx, c, http.MethodGet, "/v1/souls/"+esc(sid), nil, nil)
}

// SoulList returns a page of souls.
func (c *Client) SoulList(ctx context.Context, o ListOptions) (*SoulList, error) {
	return call[SoulList](ctx, c, http.MethodGet, "/v1/souls", o.query(), nil)
}

// SoulDelete removes a soul from the registry.
func (c *Client) SoulDelete(ctx context.Context, sid string) error {
	return c.do(ctx, http.MethodDelete, "/v1/souls/"+esc(sid), nil, nil, nil)
}

// TokenCreate issues an API token; the answer holds the plain token once.
func (c *Client) TokenCreate(ctx context.Context, in TokenCreate) (*TokenCreated, error) {
	return call[TokenCreated](ctx, c, http.MethodPost, "/v1/tokens", nil, in)
}

// TokenList returns a page of tokens.
func (c *Client) TokenList(ctx context.Context, o ListOptions) (*TokenList, error) {
	return call[TokenList](ctx, c, http.MethodGet, "/v1/tokens", o.query(), nil)
}

// TokenRevoke revokes a token by id.
func (c *Client) TokenRevoke(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/v1/tokens/"+esc(id), nil, nil, nil)
}

// AuditListOptions pages through the audit log; Verify also checks the
// whole hash chain.
type AuditListOptions struct {
	ListOptions
	Verify bool
}

// AuditList returns a page of audit events (and the verification report
// when asked).
func (c *Client) AuditList(ctx context.Context, o AuditListOptions) (*AuditList, error) {
	q := o.query()
	if o.Verify {
		q.Set("verify", "true")
	}
	return call[AuditList](ctx, c, http.MethodGet, "/v1/audit", q, nil)
}

// CloudOrphans lists orphaned VMs of one provider (all when empty), every
// page of them.
func (c *Client) CloudOrphans(ctx context.Context, provider string) (*OrphanList, error) {
	q := url.Values{}
	if provider != "" {
		q.Set("provider", provider)
	}
	items, err := allPages(ctx, c, "/v1/cloud/orphans", q, func(l *OrphanList) ([]Orphan, string) { return l.Items, l.Next })
	if err != nil {
		return nil, err
	}
	return &OrphanList{Items: items}, nil
}

// CloudOrphansDestroy destroys orphaned VMs.
func (c *Client) CloudOrphansDestroy(ctx context.Context, in OrphansDestroy) (*OrphanList, error) {
	return call[OrphanList](ctx, c, http.MethodPost, "/v1/cloud/orphans/destroy", nil, in)
}

// SeedList lists a soul's seeds, every page of them.
func (c *Client) SeedList(ctx context.Context, sid string) (*SeedList, error) {
	items, err := allPages(ctx, c, "/v1/souls/"+esc(sid)+"/seeds", nil, func(l *SeedList) ([]Seed, string) { return l.Items, l.Next })
	if err != nil {
		return nil, err
	}
	return &SeedList{Items: items}, nil
}

// SeedApply runs one of a soul's seeds now, as its creator, under the
// seed's own run key (seed:SID:ID): the run it started, or the one that
// key names already.
func (c *Client) SeedApply(ctx context.Context, sid string, id int64) (*Run, error) {
	return call[Run](ctx, c, http.MethodPost, "/v1/souls/"+esc(sid)+"/seeds/"+strconv.FormatInt(id, 10)+"/apply", nil, nil)
}

// SeedAdd adds a seed to a soul; on a soul that joined already it runs at
// once (Seed.RunID).
func (c *Client) SeedAdd(ctx context.Context, sid string, in SeedCreate) (*Seed, error) {
	return call[Seed](ctx, c, http.MethodPost, "/v1/souls/"+esc(sid)+"/seeds", nil, in)
}
