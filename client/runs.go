package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// RunCreate starts a run. It returns the run and whether it was created
// now (false: the key named an existing run with the same content).
func (c *Client) RunCreate(ctx context.Context, in RunCreate) (*Run, bool, error) {
	var out Run
	status, err := c.doStatus(ctx, http.MethodPost, "/v1/runs", nil, in, &out)
	if err != nil {
		return nil, false, err
	}
	return &out, status == http.StatusCreated, nil
}

// RunGet returns a run with its steps and outputs.
func (c *Client) RunGet(ctx context.Context, id string) (*Run, error) {
	return call[Run](ctx, c, http.MethodGet, "/v1/runs/"+esc(id), nil, nil)
}

// RunListOptions pick a page of runs: the page, and optionally only the
// runs in one phase, whose scenario name contains a text (ignoring ASCII
// case) or created at or after Since. The keeper filters before it pages.
type RunListOptions struct {
	ListOptions
	Phase Phase
	Name  string
	Since time.Time
}

// RunList returns a page of runs, newest first.
func (c *Client) RunList(ctx context.Context, o RunListOptions) (*RunList, error) {
	q := o.query()
	if o.Phase != "" {
		q.Set("phase", string(o.Phase))
	}
	if o.Name != "" {
		q.Set("name", o.Name)
	}
	if !o.Since.IsZero() {
		q.Set("since", o.Since.UTC().Format(time.RFC3339Nano))
	}
	return call[RunList](ctx, c, http.MethodGet, "/v1/runs", q, nil)
}

// RunCancel asks the keeper to cancel a run.
func (c *Client) RunCancel(ctx context.Context, id string) (*Run, error) {
	return call[Run](ctx, c, http.MethodPost, "/v1/runs/"+esc(id)+"/cancel", nil, nil)
}

// RunEvents streams a run's events after afterSeq (0: from the start)
// until the run has finished and every event was delivered, fn returns an
// error, or ctx ends. A broken stream is resumed with Last-Event-ID. A
// stream the keeper ends because the token no longer works returns that
// *Problem.
func (c *Client) RunEvents(ctx context.Context, id string, afterSeq int64, fn func(RunEvent) error) error {
	last := afterSeq
	backoff := 200 * time.Millisecond
	for {
		done, err := c.streamOnce(ctx, id, &last, fn)
		if done || ctx.Err() != nil {
			if err == nil {
				err = ctx.Err()
			}
			return err
		}
		if p, ok := err.(*Problem); ok {
			return p
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		if backoff < 5*time.Second {
			backoff *= 2
		}
	}
}

// streamOnce reads one SSE connection. done is true when the stream ended
// normally (the run finished) or fn failed.
func (c *Client) streamOnce(ctx context.Context, id string, last *int64, fn func(RunEvent) error) (bool, error) {
	u := *c.base
	u.Path += "/v1/runs/" + esc(id) + "/events"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return true, err
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Last-Event-ID", strconv.FormatInt(*last, 10))
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	hc := *c.http
	hc.Timeout = 0 // a stream lasts as long as the run
	resp, err := hc.Do(req)
	if err != nil {
		if ce := c.certificateError(err); ce != err {
			return true, ce // not a broken stream: retrying cannot help
		}
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		p := &Problem{}
		if json.Unmarshal(data, p) != nil || p.Code == "" {
			p = &Problem{Status: resp.StatusCode, Code: "http." + strconv.Itoa(resp.StatusCode), Detail: string(data)}
		}
		return true, p
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var data strings.Builder
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if data.Len() == 0 {
				continue
			}
			var ev RunEvent
			if err := json.Unmarshal([]byte(data.String()), &ev); err != nil {
				return true, fmt.Errorf("decode run event: %w", err)
			}
			data.Reset()
			if ev.Kind == EventStreamEnd {
				return true, nil
			}
			if ev.Kind == EventStreamDenied {
				p := &Problem{}
				if json.Unmarshal(ev.Data, p) != nil || p.Code == "" {
					p = &Problem{Status: http.StatusUnauthorized, Code: "auth.invalid_token", Detail: string(ev.Data)}
				}
				return true, p
			}
			*last = ev.Seq
			if err := fn(ev); err != nil {
				return true, err
			}
		case strings.HasPrefix(line, "data:"):
			data.WriteString(strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		}
	}
	if err := sc.Err(); err != nil {
		return false, err
	}
	return false, io.ErrUnexpectedEOF
}

// RunWait polls until the run is finished or ctx ends.
func (c *Client) RunWait(ctx context.Context, id string) (*Run, error) {
	for {
		r, err := c.RunGet(ctx, id)
		if err != nil {
			return nil, err
		}
		if Terminal(r.Phase) {
			return r, nil
		}
		select {
		case <-ctx.Done():
			return r, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// RunOutputs returns a run's stored outputs whole (a run's answer cuts
// them to fit): all steps' by step name, step's alone, or with sid that
// one target's.
func (c *Client) RunOutputs(ctx context.Context, id, step, sid string) (json.RawMessage, error) {
	q := url.Values{}
	if step != "" {
		q.Set("step", step)
	}
	if sid != "" {
		q.Set("sid", sid)
	}
	out, err := call[json.RawMessage](ctx, c, http.MethodGet, "/v1/runs/"+esc(id)+"/outputs", q, nil)
	if err != nil {
		return nil, err
	}
	return *out, nil
}

// ScenarioValidate checks a scenario and its input as a run of it would be
// checked, running nothing: every problem, located.
func (c *Client) ScenarioValidate(ctx context.Context, in ScenarioValidate) (*ScenarioValidation, error) {
	return call[ScenarioValidation](ctx, c, http.MethodPost, "/v1/scenarios/validate", nil, in)
}

// RunApproval is a run's step an approval policy held.
type RunApproval struct {
	Step        string     `json:"step"`
	Module      string     `json:"module"`
	Policies    []string   `json:"policies" doc:"The ids of the approval policies that held the step."`
	Why         string     `json:"why" doc:"Why, in words."`
	Status      string     `json:"status" enum:"pending,approved,rejected,expired"`
	RequestedAt time.Time  `json:"requested_at"`
	ExpiresAt   time.Time  `json:"expires_at" doc:"A pending approval nobody decides by then expires, and the run ends Rejected."`
	DecidedBy   string     `json:"decided_by,omitempty" required:"false" doc:"The token that decided (keeper for an expiry)."`
	Person      string     `json:"person,omitempty" required:"false" doc:"The person who decided: the issuer and subject of their ID token."`
	DecidedAt   *time.Time `json:"decided_at,omitempty" required:"false"`
	Reason      string     `json:"reason,omitempty" required:"false"`
}

// RunDecision is the body of POST /v1/runs/{id}/approve and /reject.
type RunDecision struct {
	Reason string `json:"reason" minLength:"1" maxLength:"1000" doc:"Why: kept in the run and the audit log."`
}

// RunApprove approves the step the run waits on; RunReject rejects it
// and the run ends Rejected.
func (c *Client) RunApprove(ctx context.Context, id, reason string) (*Run, error) {
	return call[Run](ctx, c, http.MethodPost, "/v1/runs/"+esc(id)+"/approve", nil, RunDecision{Reason: reason})
}

// RunReject rejects the step the run waits on: the run ends Rejected.
func (c *Client) RunReject(ctx context.Context, id, reason string) (*Run, error) {
	return call[Run](ctx, c, http.MethodPost, "/v1/runs/"+esc(id)+"/reject", nil, RunDecision{Reason: reason})
}

// ApprovalPolicy is the approval policy set through the API (GET and PUT
// /v1/approvals/policy); keeper.yml's approvals come on top of it.
type ApprovalPolicy struct {
	Policy string `json:"policy" maxLength:"262144" doc:"Cedar forbid rules: what one forbids, a run does only once a second person approves (docs/approvals.md). Empty: none."`
	Config string `json:"config,omitempty" required:"false" readOnly:"true" doc:"keeper.yml's approvals.policy, which applies too."`
}

// ApprovalPolicyGet returns the approval policy.
func (c *Client) ApprovalPolicyGet(ctx context.Context) (*ApprovalPolicy, error) {
	return call[ApprovalPolicy](ctx, c, http.MethodGet, "/v1/approvals/policy", nil, nil)
}

// ApprovalPolicySet replaces the approval policy set through the API.
func (c *Client) ApprovalPolicySet(ctx context.Context, policy string) (*ApprovalPolicy, error) {
	return call[ApprovalPolicy](ctx, c, http.MethodPut, "/v1/approvals/policy", nil, ApprovalPolicy{Policy: policy})
}
