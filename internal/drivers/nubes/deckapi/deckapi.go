// Package deckapi is a client of Nubes' deck-api, the JSON REST API of
// "service instances" and their asynchronous "operations" that the Nubes
// cloud (vCloud Director behind it) is driven through. There is no SDK;
// this is what the public source of Nubes' own Terraform provider shows
// of the API (docs/drivers/nubes.md says what is and is not public).
//
// Every call has a deadline (Client.CallTimeout) and reads at most
// Client.MaxAnswer bytes of answer. A call the service could not take
// (5xx, 429 throttling, 422 "Concurrent operations" while another
// operation of the instance runs) is retried with jittered, doubling
// delays; any other 4xx is not. The bearer token is asked of Token for
// each call and held for it only: it is never logged and never in an
// error.
package deckapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"
)

// ServiceVM and ServiceVApp are the deck-api's service ids of a virtual
// machine and of the vApp it goes into.
const (
	ServiceVM   = 28
	ServiceVApp = 26
)

// Operations the driver runs on a VM instance.
const (
	OpCreate  = "create"
	OpModify  = "modify"
	OpSuspend = "suspend"
	OpDelete  = "delete"
)

// Client calls one deck-api.
type Client struct {
	// BaseURL is the API's root, e.g. https://deck-api.ngcloud.ru/api/v1/index.cfm.
	BaseURL string
	// Token returns the bearer token for one call.
	Token func(ctx context.Context) (string, error)
	// HTTP sends the requests; nil: a client that follows no redirect.
	HTTP *http.Client
	// CallTimeout bounds each attempt; 0: 30 s.
	CallTimeout time.Duration
	// MaxAnswer bounds an answer's body; 0: 4 MiB.
	MaxAnswer int64
	// Attempts is how many times a retryable call is tried; 0: 6.
	// RetryBase is the first retry's delay, doubled up to 30 s, each
	// with up to half of it added at random; 0: 1 s.
	Attempts  int
	RetryBase time.Duration
	// Sleep waits between attempts; nil: a timer that stops with ctx.
	Sleep func(ctx context.Context, d time.Duration) error
	// UserAgent is sent with every request.
	UserAgent string
}

// Error is an answer the deck-api refused a call with.
type Error struct {
	Method, Path string // the call, without its query
	Status       int
	// Message is the answer's own message, cut to 300 bytes.
	Message string
}

func (e *Error) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	return fmt.Sprintf("deck-api %s %s: %d %s", e.Method, e.Path, e.Status, msg)
}

// Retryable reports whether the call may succeed when sent again.
func (e *Error) Retryable() bool {
	return e.Status >= 500 || e.Status == http.StatusTooManyRequests || e.Concurrent()
}

// Concurrent reports a 422 refused because another operation of the
// instance is running.
func (e *Error) Concurrent() bool {
	return e.Status == http.StatusUnprocessableEntity && strings.Contains(strings.ToLower(e.Message), "concurrent")
}

// Errors a caller tells apart with errors.Is.
var (
	// ErrUnauthorized: the token was refused (expired: a new one is
	// copied from the customer portal).
	ErrUnauthorized = errors.New("deck-api: the token was refused (401): it has expired or is not one of this account's")
	// ErrNotFound: the instance or operation does not exist (any more).
	ErrNotFound = errors.New("deck-api: not found (404)")
	// ErrTooLarge: an answer was larger than Client.MaxAnswer.
	ErrTooLarge = errors.New("deck-api: the answer is larger than the client reads")
)

// Is makes a 401 ErrUnauthorized and a 404 ErrNotFound.
func (e *Error) Is(target error) bool {
	return (target == ErrUnauthorized && e.Status == http.StatusUnauthorized) ||
		(target == ErrNotFound && e.Status == http.StatusNotFound)
}

// InstanceRef is one line of the instance list.
type InstanceRef struct {
	UID         string `json:"instanceUid"`
	DisplayName string `json:"displayName"`
	ServiceID   int    `json:"serviceId"`
	Service     string `json:"svc"`
}

// Instance is one service instance.
type Instance struct {
	UID                 string `json:"instanceUid"`
	DisplayName         string `json:"displayName"`
	Description         string `json:"descr"`
	ServiceID           int    `json:"serviceId"`
	Status              string `json:"status"`
	ExplainedStatus     string `json:"explainedStatus"`
	OperationInProgress bool   `json:"operationIsInProgress"`
	OperationPending    bool   `json:"operationIsPending"`
	AvailableOperations []struct {
		ID        int    `json:"svcOperationId"`
		Operation string `json:"operation"`
	} `json:"availableOperations"`
	State struct {
		Params map[string]any `json:"params"`
	} `json:"state"`
}

// Operation is one operation on an instance: pending, in progress, then
// finished when Finished is set; Successful stays nil until then.
type Operation struct {
	UID         string     `json:"instanceOperationUid"`
	InstanceUID string     `json:"instanceUid"`
	Operation   string     `json:"operation"`
	Pending     bool       `json:"isPending"`
	InProgress  bool       `json:"isInProgress"`
	Finished    *time.Time `json:"dtFinish"`
	Successful  *bool      `json:"isSuccessful"`
	ErrorLog    string     `json:"errorLog"`
	Stages      []Stage    `json:"stages"`
	Params      []Param    `json:"cfsParams"`
}

// Stage is one stage of an operation.
type Stage struct {
	Name       string `json:"stage"`
	Successful *bool  `json:"isSuccessful"`
	Message    string `json:"stageMsg"`
}

// Param is one parameter of an operation, as the operation discovered
// it: its id and name, the value set (a string, as the API keeps
// them) and its default.
type Param struct {
	UID      string `json:"instanceOperationCfsParamUid"`
	ID       int    `json:"svcOperationCfsParamId"`
	Name     string `json:"svcOperationCfsParam"`
	Value    string `json:"paramValue"`
	Default  string `json:"defaultValue"`
	DataType string `json:"dataType"`
}

// Instances lists one page (from 1) of the account's instances; an empty
// page is past the last.
func (c *Client) Instances(ctx context.Context, page, size int) ([]InstanceRef, error) {
	var out struct {
		Results []InstanceRef `json:"results"`
	}
	q := url.Values{"page": {strconv.Itoa(page)}, "size": {strconv.Itoa(size)}}
	_, err := c.call(ctx, http.MethodGet, "/instances", q, nil, &out)
	return out.Results, err
}

// Instance reads one instance.
func (c *Client) Instance(ctx context.Context, uid string) (Instance, error) {
	var out struct {
		Instance Instance `json:"instance"`
	}
	_, err := c.call(ctx, http.MethodGet, "/instances/"+url.PathEscape(uid), nil, nil, &out)
	return out.Instance, err
}

// CreateInstance orders an instance of service and returns its uid.
func (c *Client) CreateInstance(ctx context.Context, service int, displayName, description string) (string, error) {
	var out struct {
		UID string `json:"instanceUid"`
	}
	loc, err := c.call(ctx, http.MethodPost, "/instances", nil,
		map[string]any{"serviceId": service, "displayName": displayName, "descr": description}, &out)
	return created(loc, out.UID, err)
}

// StartOperation creates operation op on an instance and returns its uid;
// its parameters are then set (SetParam) and it is run (Run).
func (c *Client) StartOperation(ctx context.Context, instance, op string) (string, error) {
	var out struct {
		UID string `json:"instanceOperationUid"`
	}
	loc, err := c.call(ctx, http.MethodPost, "/instanceOperations", nil,
		map[string]any{"instanceUid": instance, "operation": op}, &out)
	return created(loc, out.UID, err)
}

// Operation reads an operation, with its parameters.
func (c *Client) Operation(ctx context.Context, uid string) (Operation, error) {
	var out struct {
		Operation Operation `json:"instanceOperation"`
	}
	_, err := c.call(ctx, http.MethodGet, "/instanceOperations/"+url.PathEscape(uid), url.Values{"fields": {"cfsParams"}}, nil, &out)
	return out.Operation, err
}

// SetParam sets parameter p of operation op to value: added when the
// operation has no value for it yet (p.UID empty), changed otherwise.
func (c *Client) SetParam(ctx context.Context, op string, p Param, value string) error {
	body := map[string]any{"instanceOperationUid": op, "svcOperationCfsParamId": p.ID, "paramValue": value}
	if p.UID == "" {
		_, err := c.call(ctx, http.MethodPost, "/instanceOperationCfsParams", nil, body, nil)
		return err
	}
	body["instanceOperationCfsParamUid"] = p.UID
	_, err := c.call(ctx, http.MethodPut, "/instanceOperationCfsParams/"+url.PathEscape(p.UID), nil, body, nil)
	return err
}

// Validate asks the API to check an operation's parameters.
func (c *Client) Validate(ctx context.Context, op string) error {
	_, err := c.call(ctx, http.MethodGet, "/instanceOperations/"+url.PathEscape(op)+"/validate-cfs", nil, nil, nil)
	return err
}

// Run runs an operation; it finishes asynchronously (Operation.Finished).
func (c *Client) Run(ctx context.Context, op string) error {
	_, err := c.call(ctx, http.MethodPost, "/instanceOperations/"+url.PathEscape(op)+"/run", nil, nil, nil)
	return err
}

// created is the uid of what a POST made: the body's, or else the last
// segment of its Location.
func created(location, uid string, err error) (string, error) {
	if err != nil {
		return "", err
	}
	if uid == "" && location != "" {
		if u, perr := url.Parse(location); perr == nil {
			uid = path.Base(u.Path)
		}
	}
	if uid == "" || uid == "." || uid == "/" {
		return "", errors.New("deck-api: the answer names nothing created (no uid, no Location)")
	}
	return uid, nil
}

// call sends one request, retrying what may succeed again, decodes a 2xx
// answer's body into out (when not nil) and returns its Location.
func (c *Client) call(ctx context.Context, method, p string, q url.Values, in, out any) (string, error) {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return "", err
		}
	}
	attempts, delay := c.Attempts, c.RetryBase
	if attempts <= 0 {
		attempts = 6
	}
	if delay <= 0 {
		delay = time.Second
	}
	for i := 1; ; i++ {
		loc, err := c.once(ctx, method, p, q, body, out)
		var apiErr *Error
		if err == nil || ctx.Err() != nil || i >= attempts || !errors.As(err, &apiErr) || !apiErr.Retryable() {
			return loc, err
		}
		wait := delay + rand.N(delay/2+1)
		if err := c.sleep(ctx, wait); err != nil {
			return "", fmt.Errorf("%w (gave up waiting to retry: %v)", apiErr, err)
		}
		delay = min(2*delay, 30*time.Second)
	}
}

// once sends one attempt.
func (c *Client) once(ctx context.Context, method, p string, q url.Values, body []byte, out any) (string, error) {
	timeout, limit := c.CallTimeout, c.MaxAnswer
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	if limit <= 0 {
		limit = 4 << 20
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	token, err := c.Token(ctx)
	if err != nil {
		return "", fmt.Errorf("deck-api: the token: %w", err)
	}
	u := strings.TrimRight(c.BaseURL, "/") + p
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return "", fmt.Errorf("deck-api %s %s: %w", method, p, err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.UserAgent != "" {
		req.Header.Set("User-Agent", c.UserAgent)
	}
	resp, err := c.httpClient().Do(req)
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			// This attempt's deadline or the caller's: not the service's
			// failure, and nothing to retry when it is the caller's.
			return "", fmt.Errorf("deck-api %s %s: %w", method, p, cerr)
		}
		// Transport errors name the URL, never the header.
		return "", &Error{Method: method, Path: p, Status: http.StatusBadGateway, Message: cut(err.Error())}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return "", &Error{Method: method, Path: p, Status: http.StatusBadGateway, Message: "reading the answer: " + cut(err.Error())}
	}
	if int64(len(raw)) > limit {
		return "", fmt.Errorf("%w (%s %s: over %d bytes)", ErrTooLarge, method, p, limit)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		// An answer that echoes the token does not carry it further.
		msg := strings.ReplaceAll(messageOf(raw), token, "[token]")
		return "", &Error{Method: method, Path: p, Status: resp.StatusCode, Message: msg}
	}
	if out != nil && len(bytes.TrimSpace(raw)) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			return "", fmt.Errorf("deck-api %s %s: the answer is not what the client reads: %v", method, p, err)
		}
	}
	return resp.Header.Get("Location"), nil
}

func (c *Client) httpClient() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return noRedirects
}

// noRedirects follows no redirect: a redirect would carry the token to
// wherever it points.
var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func (c *Client) sleep(ctx context.Context, d time.Duration) error {
	if c.Sleep != nil {
		return c.Sleep(ctx, d)
	}
	return Sleep(ctx, d)
}

// Sleep waits d, or until ctx ends (then it returns ctx's error): how a
// deck-api client waits between attempts and between polls.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// messageOf is an error answer's message: its message, error or detail
// field, or else its text.
func messageOf(raw []byte) string {
	var m map[string]any
	if json.Unmarshal(raw, &m) == nil {
		for _, k := range []string{"message", "error", "detail", "errorLog"} {
			if s, ok := m[k].(string); ok && s != "" {
				return cut(s)
			}
		}
	}
	return cut(strings.TrimSpace(string(raw)))
}

func cut(s string) string {
	if len(s) > 300 {
		return s[:300] + "…"
	}
	return s
}
