// Package notify delivers outgoing webhooks: each event a notification of
// keeper.yml names is POSTed to its URL as JSON, signed with HMAC-SHA256
// over the timestamp and the body (the scheme Stripe and GitHub use), from
// the keepers' durable queue (River) with retries and backoff, and every
// delivery and attempt is logged for the API.
//
// A receiver checks a delivery with the secret it shares with the keeper:
//
//	X-Soulstack-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>
//
// rejecting a t too far from its clock (replays) and a v1 that differs
// (compare in constant time). X-Soulstack-Event names the event and
// X-Soulstack-Delivery the delivery (the same on every attempt of it).
package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/soulstack/soulstack/internal/base"

	"github.com/riverqueue/river"

	"github.com/soulstack/soulstack/internal/auth"
	"github.com/soulstack/soulstack/internal/secret"
	"github.com/soulstack/soulstack/internal/store"
)

// MaxBody bounds a delivery's JSON body; data beyond it is cut to a
// summary.
const MaxBody = 64 << 10

// maxAnswer bounds what is read of a receiver's answer.
const maxAnswer = 64 << 10

// MaxAttempts is how often a delivery is tried before it counts failed.
const MaxAttempts = 12

// Target is one notification: where its events go and the secret that
// signs them.
type Target struct {
	Name   string
	URL    string
	Events []string
	// Secret resolves the signing secret for one attempt.
	Secret func(ctx context.Context) ([]byte, error)
}

// Notifier queues and delivers notifications.
type Notifier struct {
	Targets []Target
	Store   store.DeliveryStore
	// Secrets are masked in every payload (besides secret-looking keys
	// and token patterns); nil: none.
	Secrets *secret.Keeper
	// Enqueue inserts a job into the keepers' queue (runner.Enqueue).
	Enqueue func(ctx context.Context, args river.JobArgs, opts *river.InsertOpts) error
	// Client sends the deliveries; nil means one with a 10 s timeout
	// that follows no redirect.
	Client *http.Client
	// RetryBase is the first retry's delay, doubled on each retry up to
	// five minutes; zero means one second.
	RetryBase time.Duration
	// Metrics counts the attempts; nil: none.
	Metrics *Metrics
	// Base is the notifier's logger and clock (nil: discarded, the real
	// clock).
	base.Base
}

// Payload is a delivery's body.
type Payload struct {
	ID     string    `json:"id"`
	Event  string    `json:"event"`
	At     time.Time `json:"at"`
	Object string    `json:"object"`
	// Project is the project the event is about; absent for a
	// keeper-wide event.
	Project string `json:"project,omitempty"`
	Data    any    `json:"data"`
}

// DeliveryArgs are a delivery job's args: the body is fixed when the event
// happens, so every attempt sends the same bytes.
type DeliveryArgs struct {
	ID           string          `json:"id"`
	Notification string          `json:"notification"`
	Event        string          `json:"event"`
	Body         json.RawMessage `json:"body"`
}

// Kind is the job's stable kind name.
func (DeliveryArgs) Kind() string { return "soulstack.webhook" }

func (n *Notifier) now() time.Time {
	if n.Clock == nil {
		return time.Now()
	}
	return n.Clock.Now()
}

func (n *Notifier) log() *slog.Logger {
	if n.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return n.Log
}

// Notify queues event (about object of project, "" for a keeper-wide
// one, with data) for every notification that names it. A delivery that
// cannot be queued is logged, never returned: the event itself has
// happened.
func (n *Notifier) Notify(ctx context.Context, project, event, object string, data any) {
	if err := n.Send(ctx, project, event, object, data); err != nil {
		n.log().Error("queue a webhook delivery", "event", event, "object", object, "err", err)
	}
}

// Send is Notify returning the first error that kept a delivery from
// being queued (the others are queued all the same), for a caller that
// tries again: a target queued before the error may then be queued twice
// (deliveries are at least once; a receiver that must act once dedupes
// by event and object).
func (n *Notifier) Send(ctx context.Context, project, event, object string, data any) error {
	if n == nil {
		return nil
	}
	var first error
	for _, t := range n.Targets {
		if !slices.Contains(t.Events, event) {
			continue
		}
		if err := n.queue(ctx, t, project, event, object, data); err != nil && first == nil {
			first = fmt.Errorf("notification %s: %w", t.Name, err)
		}
	}
	return first
}

func (n *Notifier) queue(ctx context.Context, t Target, project, event, object string, data any) error {
	id, err := auth.NewID("dlv_")
	if err != nil {
		return err
	}
	// Masked as the audit log is: secret-looking keys and the keeper's
	// registered secrets never leave in a webhook.
	data = n.Secrets.Mask(data)
	body, err := json.Marshal(Payload{ID: id, Event: event, At: n.now().UTC(), Object: object, Project: project, Data: data})
	if err != nil {
		return err
	}
	if len(body) > MaxBody {
		body, _ = json.Marshal(Payload{ID: id, Event: event, At: n.now().UTC(), Object: object, Project: project,
			Data: map[string]any{"truncated": true, "note": fmt.Sprintf("the event's data was %d bytes, over %d; read it from the API", len(body), MaxBody)}})
	}
	ctx = context.WithoutCancel(ctx)
	if err := n.Store.DeliveryCreate(ctx, store.Delivery{ID: id, Notification: t.Name, Event: event, Object: object, Project: project}); err != nil {
		return err
	}
	return n.Enqueue(ctx, DeliveryArgs{ID: id, Notification: t.Name, Event: event, Body: body}, &river.InsertOpts{MaxAttempts: MaxAttempts})
}

// Worker is the queue's worker for deliveries.
func (n *Notifier) Worker() river.Worker[DeliveryArgs] { return &worker{n: n} }

type worker struct {
	river.WorkerDefaults[DeliveryArgs]
	n *Notifier
}

// NextRetry doubles the delay from RetryBase, at most five minutes.
func (w *worker) NextRetry(job *river.Job[DeliveryArgs]) time.Time {
	base := w.n.RetryBase
	if base <= 0 {
		base = time.Second
	}
	d := base << min(job.Attempt-1, 20)
	return time.Now().Add(min(d, 5*time.Minute))
}

// Timeout bounds one attempt.
func (w *worker) Timeout(*river.Job[DeliveryArgs]) time.Duration { return 30 * time.Second }

func (w *worker) Work(ctx context.Context, job *river.Job[DeliveryArgs]) error {
	n := w.n
	a := job.Args
	i := slices.IndexFunc(n.Targets, func(t Target) bool { return t.Name == a.Notification })
	if i < 0 {
		_ = n.Store.DeliveryAttempt(ctx, a.ID, store.DeliveryFailed, 0, "the notification is no longer in keeper.yml")
		return river.JobCancel(fmt.Errorf("notification %q is not configured", a.Notification))
	}
	code, err := n.send(ctx, n.Targets[i], a)
	status, outcome := store.DeliveryDelivered, outcomeDelivered
	msg := ""
	if err != nil {
		msg = err.Error()
		status, outcome = store.DeliveryPending, outcomeRetried
		if job.Attempt >= job.MaxAttempts {
			status, outcome = store.DeliveryFailed, outcomeFailed
		}
	}
	n.Metrics.attempt(a.Notification, outcome)
	if lerr := n.Store.DeliveryAttempt(context.WithoutCancel(ctx), a.ID, status, code, msg); lerr != nil {
		n.log().Warn("log a webhook attempt", "delivery", a.ID, "err", lerr)
	}
	return err
}

// send POSTs one attempt and returns the receiver's status code.
func (n *Notifier) send(ctx context.Context, t Target, a DeliveryArgs) (int, error) {
	secret, err := t.Secret(ctx)
	if err != nil {
		return 0, fmt.Errorf("resolve the signing secret: %w", err)
	}
	ts := strconv.FormatInt(n.now().Unix(), 10)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.URL, bytes.NewReader(a.Body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "soulstack-keeper")
	req.Header.Set("X-Soulstack-Event", a.Event)
	req.Header.Set("X-Soulstack-Delivery", a.ID)
	req.Header.Set("X-Soulstack-Signature", "t="+ts+",v1="+Sign(secret, ts, a.Body))
	c := n.Client
	if c == nil {
		c = &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	resp, err := c.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is in the log row already
		}
		return 0, fmt.Errorf("post: %w", err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, fmt.Errorf("the receiver answered %s: %.200s", resp.Status, answer)
	}
	return resp.StatusCode, nil
}

// Sign is the v1 signature of body sent at ts: hex HMAC-SHA256 of
// "<ts>.<body>" under secret.
func Sign(secret []byte, ts string, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// Verify checks a delivery's signature header against body with secret:
// what a receiver does. tolerance bounds how old (or early) t may be.
func Verify(secret []byte, header string, body []byte, now time.Time, tolerance time.Duration) error {
	var ts, sig string
	for _, part := range bytes.Split([]byte(header), []byte(",")) {
		k, v, _ := bytes.Cut(part, []byte("="))
		switch string(k) {
		case "t":
			ts = string(v)
		case "v1":
			sig = string(v)
		}
	}
	t, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || sig == "" {
		return errors.New("no t= and v1= in the signature header")
	}
	if d := now.Sub(time.Unix(t, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("the signature's time is %s away: a replay, or a clock off", d.Round(time.Second))
	}
	if !hmac.Equal([]byte(sig), []byte(Sign(secret, ts, body))) {
		return errors.New("the signature does not match")
	}
	return nil
}

// EventArgs is an event queued in the transaction that made it happen (the
// outbox): its worker queues its deliveries (Send), at least once.
type EventArgs struct {
	Project string          `json:"project"`
	Event   string          `json:"event"`
	Object  string          `json:"object"`
	Data    json.RawMessage `json:"data"`
}

// Kind is the job's stable kind name.
func (EventArgs) Kind() string { return "soulstack.notify_event" }

// Wants reports whether a notification names event.
func (n *Notifier) Wants(event string) bool {
	if n == nil {
		return false
	}
	for _, t := range n.Targets {
		if slices.Contains(t.Events, event) {
			return true
		}
	}
	return false
}

// EventWorker is the queue's worker for EventArgs.
func (n *Notifier) EventWorker() river.Worker[EventArgs] { return &eventWorker{n: n} }

type eventWorker struct {
	river.WorkerDefaults[EventArgs]
	n *Notifier
}

func (w *eventWorker) Work(ctx context.Context, job *river.Job[EventArgs]) error {
	return w.n.Send(ctx, job.Args.Project, job.Args.Event, job.Args.Object, job.Args.Data)
}
