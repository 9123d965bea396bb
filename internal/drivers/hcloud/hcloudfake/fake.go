// Package hcloudfake is a FAKE of the Hetzner Cloud API, for tests only.
// It is written from Hetzner's public API reference
// (https://docs.hetzner.cloud), speaks its JSON (the request and answer
// shapes of hcloud-go's schema package) and listens on 127.0.0.1. It is
// not Hetzner Cloud and was never checked against it; a driver passing its
// tests has been tested against this model of the API, not against the
// cloud.
//
// It serves the parts of the API the soul-cloud-hcloud driver uses:
//
//	GET/POST   /v1/servers            (label_selector, name filters; pagination meta)
//	GET/DELETE /v1/servers/{id}
//	POST       /v1/servers/{id}/actions/{poweroff,shutdown,poweron,change_type}
//	GET        /v1/actions?id=…, /v1/actions/{id}
//	GET        /v1/server_types, /v1/images, /v1/networks, /v1/firewalls, /v1/ssh_keys (and /{id})
//
// and models what breaks real drivers, each behind a knob tests turn:
//   - asynchronous state: a new server is "initializing" while its
//     create_server action runs (ActionReads reads), then "starting" for
//     BootReads reads of it, then "running"; power and type changes are
//     actions that finish after ActionReads reads;
//   - eventual consistency: a new server is missing from the first
//     HideReads reads (GET by id answers not_found, lists leave it out);
//   - throttling: Throttle(n) answers the next n requests with 429
//     rate_limit_exceeded and RateLimit-* headers (Throttled counts them);
//   - quota: ServerLimit servers at most, then 403 resource_limit_exceeded
//     (so the 4th of 5 creates fails with a limit of 3);
//   - failed actions: FailCreateActions makes create actions end in
//     error, FailChangeType refuses type changes;
//   - transient failures: FailNext(n, status, code) answers the next n
//     requests with that error (502 bad_gateway, 500 server_error, …);
//   - authentication: a request without "Authorization: Bearer <Token>"
//     gets 401 unauthorized;
//   - names are unique per project: a second server of the same name gets
//     409 uniqueness_error (what makes the driver's name lookup safe);
//   - a lost answer: HoldCreates makes the next create store the server
//     and then hold its answer until Release (or until the client goes
//     away), as when a driver dies after the cloud accepted the create.
//
// Reads advance state (not wall-clock time), so tests are deterministic.
package hcloudfake

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud/schema"
)

// Fake is a running fake Hetzner Cloud API.
type Fake struct {
	// URL is the API endpoint (what hcloud.WithEndpoint takes), ending in /v1.
	URL string
	// Token is the API token the fake accepts.
	Token string

	srv *httptest.Server

	mu sync.Mutex
	// Knobs (set them before the requests they should affect; under mu
	// through the setters below).
	actionReads      int
	bootReads        int
	hideReads        int
	serverLimit      int
	throttle         int
	failN            int
	failStatus       int
	failCode         string
	hold             bool
	failCreateAction bool
	failChangeType   string
	accepted         chan int64
	release          chan struct{}

	nextID    int64
	servers   map[int64]*server
	actions   map[int64]*action
	networks  []schema.Network
	firewalls []schema.Firewall
	sshKeys   []schema.SSHKey

	// Counters.
	throttled int
	creates   int
	deletes   int
	requests  []string
}

type server struct {
	s        schema.Server
	pending  *action // create or power/type change in progress
	boot     int     // reads left in "starting"
	hidden   int     // reads left in which the server is invisible
	userData string
}

type action struct {
	a      schema.Action
	left   int
	onDone func()
}

var serverTypes = []schema.ServerType{
	{ID: 1, Name: "cx22", Cores: 2, Memory: 4, Disk: 40, Architecture: "x86", StorageType: "local", CPUType: "shared"},
	{ID: 2, Name: "cx32", Cores: 4, Memory: 8, Disk: 80, Architecture: "x86", StorageType: "local", CPUType: "shared"},
	{ID: 3, Name: "cx42", Cores: 8, Memory: 16, Disk: 160, Architecture: "x86", StorageType: "local", CPUType: "shared"},
	{ID: 4, Name: "cpx11", Cores: 2, Memory: 2, Disk: 40, Architecture: "x86", StorageType: "local", CPUType: "shared"},
}

var images = []string{"ubuntu-24.04", "debian-12", "debian-13"}

var locations = []string{"fsn1", "nbg1", "hel1", "ash", "hil", "sin"}

// New starts a fake on 127.0.0.1 accepting token; Close it when done.
// By default actions finish after 2 reads, servers boot after 2 more, new
// servers are hidden from their first read and there is no quota.
func New(token string) *Fake {
	f := &Fake{
		Token:       token,
		actionReads: 2,
		bootReads:   2,
		hideReads:   1,
		nextID:      1000,
		servers:     map[int64]*server{},
		actions:     map[int64]*action{},
		accepted:    make(chan int64, 16),
		release:     make(chan struct{}),
		networks: []schema.Network{{ID: 11, Name: "soulstack-net", IPRange: "10.0.0.0/16",
			Subnets: []schema.NetworkSubnet{{Type: "cloud", IPRange: "10.0.1.0/24", NetworkZone: "eu-central", Gateway: "10.0.0.1"}}}},
		firewalls: []schema.Firewall{{ID: 21, Name: "soulstack-fw"}},
		sshKeys:   []schema.SSHKey{{ID: 31, Name: "admin", Fingerprint: "00:11", PublicKey: "ssh-ed25519 AAAA admin"}},
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(fmt.Sprintf("hcloudfake: listen: %v", err))
	}
	f.srv = &httptest.Server{Listener: l, Config: &http.Server{Handler: http.HandlerFunc(f.serve), ReadHeaderTimeout: 10 * time.Second}}
	f.srv.Start()
	f.URL = f.srv.URL + "/v1"
	return f
}

// Close stops the fake, releasing held creates.
func (f *Fake) Close() {
	f.Release()
	f.srv.CloseClientConnections()
	f.srv.Close()
}

// SetActionReads sets how many reads an action stays running.
func (f *Fake) SetActionReads(n int) { f.mu.Lock(); f.actionReads = n; f.mu.Unlock() }

// SetBootReads sets how many reads a new server stays "starting".
func (f *Fake) SetBootReads(n int) { f.mu.Lock(); f.bootReads = n; f.mu.Unlock() }

// SetHideReads sets how many reads a new server is missing from.
func (f *Fake) SetHideReads(n int) { f.mu.Lock(); f.hideReads = n; f.mu.Unlock() }

// SetServerLimit allows at most n servers (0: no limit).
func (f *Fake) SetServerLimit(n int) { f.mu.Lock(); f.serverLimit = n; f.mu.Unlock() }

// Throttle answers the next n requests with rate_limit_exceeded.
func (f *Fake) Throttle(n int) { f.mu.Lock(); f.throttle = n; f.mu.Unlock() }

// FailNext answers the next n requests with status and the error code
// (bad_gateway with 502, server_error with 500, …).
func (f *Fake) FailNext(n, status int, code string) {
	f.mu.Lock()
	f.failN, f.failStatus, f.failCode = n, status, code
	f.mu.Unlock()
}

// FailCreateActions makes the create_server action of every following
// create end in error (the server stays, "off", as Hetzner leaves it).
func (f *Fake) FailCreateActions() { f.mu.Lock(); f.failCreateAction = true; f.mu.Unlock() }

// FailChangeType answers every change_type with the error code.
func (f *Fake) FailChangeType(code string) { f.mu.Lock(); f.failChangeType = code; f.mu.Unlock() }

// FinishAll ends every running action successfully and lets every
// starting server run.
func (f *Fake) FinishAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, a := range f.actions {
		if a.a.Status == "running" {
			a.left = 1
			f.readAction(a.a.ID)
		}
	}
	for _, s := range f.servers {
		s.hidden = 0
		if s.s.Status == "starting" {
			s.s.Status = "running"
		}
	}
}

// HoldCreates makes every following create store its server and then hold
// the answer until Release or until the client disconnects. Accepted
// receives each held server's id once it is stored.
func (f *Fake) HoldCreates() { f.mu.Lock(); f.hold = true; f.mu.Unlock() }

// Accepted receives the id of each server a held create stored.
func (f *Fake) Accepted() <-chan int64 { return f.accepted }

// Release answers the held creates and stops holding new ones.
func (f *Fake) Release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hold {
		f.hold = false
		close(f.release)
	}
}

// Throttled is how many requests were answered rate_limit_exceeded.
func (f *Fake) Throttled() int { f.mu.Lock(); defer f.mu.Unlock(); return f.throttled }

// Creates is how many servers were created.
func (f *Fake) Creates() int { f.mu.Lock(); defer f.mu.Unlock(); return f.creates }

// Deletes is how many servers were deleted.
func (f *Fake) Deletes() int { f.mu.Lock(); defer f.mu.Unlock(); return f.deletes }

// Requests lists "METHOD path" of every request, in order.
func (f *Fake) Requests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.requests...)
}

// Server is a view of one stored server.
type Server struct {
	ID         int64
	Name       string
	Status     string
	ServerType string
	Labels     map[string]string
	UserData   string
}

// Servers lists the stored servers (hidden ones too), by id.
func (f *Fake) Servers() []Server {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := []Server{}
	for _, s := range f.servers {
		out = append(out, Server{ID: s.s.ID, Name: s.s.Name, Status: s.s.Status, ServerType: s.s.ServerType.Name, Labels: copyMap(s.s.Labels), UserData: s.userData})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// AddServer stores a running server made outside the driver (no keeper
// labels unless given), and returns its id.
func (f *Fake) AddServer(name string, labels map[string]string) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.newServer(name, serverTypes[0], "ubuntu-24.04", "fsn1", labels, nil, true, false)
	s.s.Status = "running"
	s.hidden = 0
	return s.s.ID
}

func copyMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// apiError writes Hetzner's error shape.
func apiError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"code": code, "message": msg, "details": nil}})
}

func reply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func meta(n int) schema.Meta {
	return schema.Meta{Pagination: &schema.MetaPagination{Page: 1, PerPage: 50, LastPage: 1, TotalEntries: n}}
}

var (
	reServer       = regexp.MustCompile(`^/v1/servers/(\d+)$`)
	reServerAction = regexp.MustCompile(`^/v1/servers/(\d+)/actions/([a-z_]+)$`)
	reAction       = regexp.MustCompile(`^/v1/actions/(\d+)$`)
	reNamed        = regexp.MustCompile(`^/v1/(networks|firewalls|ssh_keys|server_types|images)(?:/(\d+))?$`)
)

func (f *Fake) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.requests = append(f.requests, r.Method+" "+r.URL.Path)
	w.Header().Set("RateLimit-Limit", "3600")
	if f.throttle > 0 {
		f.throttle--
		f.throttled++
		w.Header().Set("RateLimit-Remaining", "0")
		w.Header().Set("RateLimit-Reset", strconv.FormatInt(time.Now().Add(time.Second).Unix(), 10))
		f.mu.Unlock()
		apiError(w, http.StatusTooManyRequests, "rate_limit_exceeded", "limit of 3600 requests per hour reached")
		return
	}
	if f.failN > 0 {
		f.failN--
		status, code := f.failStatus, f.failCode
		f.mu.Unlock()
		apiError(w, status, code, "injected failure")
		return
	}
	w.Header().Set("RateLimit-Remaining", "3599")
	w.Header().Set("RateLimit-Reset", strconv.FormatInt(time.Now().Unix(), 10))
	if r.Header.Get("Authorization") != "Bearer "+f.Token {
		f.mu.Unlock()
		apiError(w, http.StatusUnauthorized, "unauthorized", "unable to authenticate")
		return
	}
	p := r.URL.Path
	switch {
	case p == "/v1/servers" && r.Method == http.MethodGet:
		f.listServers(w, r)
	case p == "/v1/servers" && r.Method == http.MethodPost:
		f.createServer(w, r) // unlocks
		return
	case reServer.MatchString(p):
		id, _ := strconv.ParseInt(reServer.FindStringSubmatch(p)[1], 10, 64)
		f.oneServer(w, r, id)
	case reServerAction.MatchString(p) && r.Method == http.MethodPost:
		m := reServerAction.FindStringSubmatch(p)
		id, _ := strconv.ParseInt(m[1], 10, 64)
		f.serverAction(w, r, id, m[2])
	case p == "/v1/actions" && r.Method == http.MethodGet:
		out := []schema.Action{}
		for _, v := range r.URL.Query()["id"] {
			id, _ := strconv.ParseInt(v, 10, 64)
			if a := f.readAction(id); a != nil {
				out = append(out, a.a)
			}
		}
		reply(w, 200, map[string]any{"actions": out, "meta": meta(len(out))})
	case reAction.MatchString(p) && r.Method == http.MethodGet:
		id, _ := strconv.ParseInt(reAction.FindStringSubmatch(p)[1], 10, 64)
		if a := f.readAction(id); a != nil {
			reply(w, 200, schema.ActionGetResponse{Action: a.a})
		} else {
			apiError(w, 404, "not_found", "action not found")
		}
	case reNamed.MatchString(p) && r.Method == http.MethodGet:
		m := reNamed.FindStringSubmatch(p)
		f.named(w, r, m[1], m[2])
	default:
		apiError(w, 404, "not_found", "no such endpoint")
	}
	f.mu.Unlock()
}

// named serves the read-only collections the driver resolves names in.
func (f *Fake) named(w http.ResponseWriter, r *http.Request, kind, idStr string) {
	type item struct {
		id   int64
		name string
		v    any
	}
	var items []item
	switch kind {
	case "networks":
		for _, n := range f.networks {
			items = append(items, item{n.ID, n.Name, n})
		}
	case "firewalls":
		for _, n := range f.firewalls {
			items = append(items, item{n.ID, n.Name, n})
		}
	case "ssh_keys":
		for _, n := range f.sshKeys {
			items = append(items, item{n.ID, n.Name, n})
		}
	case "server_types":
		for _, n := range serverTypes {
			items = append(items, item{n.ID, n.Name, n})
		}
	case "images":
		for i, n := range images {
			name := n
			items = append(items, item{int64(100 + i), n, schema.Image{ID: int64(100 + i), Name: &name, Type: "system", Status: "available"}})
		}
	}
	single := map[string]string{"networks": "network", "firewalls": "firewall", "ssh_keys": "ssh_key", "server_types": "server_type", "images": "image"}[kind]
	if idStr != "" {
		id, _ := strconv.ParseInt(idStr, 10, 64)
		for _, it := range items {
			if it.id == id {
				reply(w, 200, map[string]any{single: it.v})
				return
			}
		}
		apiError(w, 404, "not_found", single+" not found")
		return
	}
	name := r.URL.Query().Get("name")
	out := []any{}
	for _, it := range items {
		if name == "" || it.name == name {
			out = append(out, it.v)
		}
	}
	reply(w, 200, map[string]any{kind: out, "meta": meta(len(out))})
}

// matchSelector reports whether labels satisfy a label selector of
// comma-separated k=v, k!=v, k and !k terms.
func matchSelector(sel string, labels map[string]string) bool {
	if sel == "" {
		return true
	}
	for _, term := range strings.Split(sel, ",") {
		term = strings.TrimSpace(term)
		switch {
		case strings.Contains(term, "!="):
			k, v, _ := strings.Cut(term, "!=")
			if labels[k] == v {
				return false
			}
		case strings.Contains(term, "="):
			k, v, _ := strings.Cut(term, "=")
			k = strings.TrimSuffix(k, "=")
			v = strings.TrimPrefix(v, "=")
			if got, ok := labels[k]; !ok || got != v {
				return false
			}
		case strings.HasPrefix(term, "!"):
			if _, ok := labels[term[1:]]; ok {
				return false
			}
		default:
			if _, ok := labels[term]; !ok {
				return false
			}
		}
	}
	return true
}

// read is one read of a server: it advances its state and reports
// whether the server is visible.
func (f *Fake) read(s *server) bool {
	if s.hidden > 0 {
		s.hidden--
		return false
	}
	if s.pending != nil {
		f.readAction(s.pending.a.ID)
	} else if s.s.Status == "starting" {
		s.boot--
		if s.boot <= 0 {
			s.s.Status = "running"
		}
	}
	return true
}

func (f *Fake) readAction(id int64) *action {
	a := f.actions[id]
	if a == nil {
		return nil
	}
	if a.a.Status == "running" {
		a.left--
		if a.left <= 0 {
			a.a.Status = "success"
			a.a.Progress = 100
			now := time.Now()
			a.a.Finished = &now
			if a.onDone != nil {
				a.onDone()
			}
		} else {
			a.a.Progress = 50
		}
	}
	return a
}

func (f *Fake) newAction(command string, serverID int64, onDone func()) *action {
	f.nextID++
	a := &action{a: schema.Action{ID: f.nextID, Status: "running", Command: command, Started: time.Now(),
		Resources: []schema.ActionResourceReference{{ID: serverID, Type: "server"}}}, left: f.actionReads, onDone: onDone}
	if a.left <= 0 {
		a.left = 1
	}
	f.actions[a.a.ID] = a
	return a
}

func (f *Fake) listServers(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	ids := make([]int64, 0, len(f.servers))
	for id := range f.servers {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	out := []schema.Server{}
	for _, id := range ids {
		s := f.servers[id]
		if name := q.Get("name"); name != "" && s.s.Name != name {
			continue
		}
		if !matchSelector(q.Get("label_selector"), s.s.Labels) {
			continue
		}
		if f.read(s) {
			out = append(out, s.s)
		}
	}
	reply(w, 200, map[string]any{"servers": out, "meta": meta(len(out))})
}

func (f *Fake) oneServer(w http.ResponseWriter, r *http.Request, id int64) {
	s := f.servers[id]
	if s == nil || !f.read(s) {
		apiError(w, 404, "not_found", fmt.Sprintf("server with ID '%d' not found", id))
		return
	}
	switch r.Method {
	case http.MethodGet:
		reply(w, 200, schema.ServerGetResponse{Server: s.s})
	case http.MethodDelete:
		delete(f.servers, id)
		f.deletes++
		a := f.newAction("delete_server", id, nil)
		reply(w, 200, schema.ServerDeleteResponse{Action: a.a})
	default:
		apiError(w, 405, "method_not_allowed", "method not allowed")
	}
}

func (f *Fake) serverAction(w http.ResponseWriter, r *http.Request, id int64, cmd string) {
	s := f.servers[id]
	if s == nil || !f.read(s) {
		apiError(w, 404, "not_found", fmt.Sprintf("server with ID '%d' not found", id))
		return
	}
	if s.pending != nil {
		apiError(w, 423, "locked", "server is locked by another action")
		return
	}
	var a *action
	done := func() { s.pending = nil }
	switch cmd {
	case "poweroff", "shutdown":
		a = f.newAction("stop_server", id, func() { done(); s.s.Status = "off" })
		if cmd == "shutdown" {
			a.a.Command = "shutdown_server"
		}
	case "poweron":
		a = f.newAction("start_server", id, func() { done(); s.s.Status = "running" })
	case "change_type":
		var req schema.ServerActionChangeTypeRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			apiError(w, 400, "json_error", "invalid JSON")
			return
		}
		st, ok := findType(req.ServerType)
		if !ok {
			apiError(w, 400, "invalid_input", "unknown server type")
			return
		}
		if f.failChangeType != "" {
			apiError(w, 422, f.failChangeType, "injected change_type failure")
			return
		}
		if s.s.Status != "off" {
			apiError(w, 409, "server_not_stopped", "the server must be stopped to change its type")
			return
		}
		a = f.newAction("change_server_type", id, func() { done(); s.s.ServerType = st })
	default:
		apiError(w, 404, "not_found", "no such action")
		return
	}
	s.pending = a
	reply(w, 201, map[string]any{"action": a.a})
}

func findType(v schema.IDOrName) (schema.ServerType, bool) {
	for _, st := range serverTypes {
		if (v.Name != "" && st.Name == v.Name) || (v.ID != 0 && st.ID == v.ID) {
			return st, true
		}
	}
	return schema.ServerType{}, false
}

var reLabelKey = regexp.MustCompile(`^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`)
var reLabelValue = regexp.MustCompile(`^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$`)

// createServer handles POST /v1/servers; it is called with f.mu held and
// unlocks it.
func (f *Fake) createServer(w http.ResponseWriter, r *http.Request) {
	var req schema.ServerCreateRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		f.mu.Unlock()
		apiError(w, 400, "json_error", "invalid JSON")
		return
	}
	fail := func(status int, code, msg string) {
		f.mu.Unlock()
		apiError(w, status, code, msg)
	}
	st, loc, labels, no := f.checkCreate(req)
	if no != nil {
		fail(no.status, no.code, no.msg)
		return
	}
	image := req.Image.Name
	v4, v6 := true, true
	if req.PublicNet != nil {
		v4, v6 = req.PublicNet.EnableIPv4, req.PublicNet.EnableIPv6
	}
	s := f.newServer(req.Name, st, image, loc, labels, req.Networks, v4, v6)
	s.userData = req.UserData
	f.creates++
	failAction := f.failCreateAction
	s.pending = f.newAction("create_server", s.s.ID, func() {
		s.pending = nil
		s.s.Status = "starting"
		s.boot = f.bootReads
	})
	if failAction {
		a := s.pending
		a.onDone = func() {
			s.pending = nil
			s.s.Status = "off"
			a.a.Status = "error"
			a.a.Error = &schema.ActionError{Code: "server_create_failed", Message: "injected create failure"}
		}
	}
	resp := schema.ServerCreateResponse{Server: s.s, Action: s.pending.a, NextActions: []schema.Action{}}
	held := f.hold
	release := f.release
	f.mu.Unlock()
	if held {
		f.accepted <- s.s.ID
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
	}
	reply(w, 201, resp)
}

// refusal is an API error answer.
type refusal struct {
	status    int
	code, msg string
}

// checkCreate refuses a create as the API does: an unknown type, image
// or location, a bad label, a taken name, the project's server limit. It
// returns the server type, the location (fsn1 by default) and the labels,
// or the refusal. f.mu is held.
func (f *Fake) checkCreate(req schema.ServerCreateRequest) (schema.ServerType, string, map[string]string, *refusal) {
	st, ok := findType(req.ServerType)
	if !ok {
		return st, "", nil, &refusal{400, "invalid_input", "invalid input in field 'server_type'"}
	}
	if !contains(images, req.Image.Name) {
		return st, "", nil, &refusal{400, "invalid_input", "invalid input in field 'image'"}
	}
	loc := req.Location
	if loc == "" {
		loc = "fsn1"
	}
	if !contains(locations, loc) {
		return st, "", nil, &refusal{400, "invalid_input", "invalid input in field 'location'"}
	}
	var labels map[string]string
	if req.Labels != nil {
		labels = *req.Labels
	}
	for k, v := range labels {
		if !reLabelKey.MatchString(k) || !reLabelValue.MatchString(v) {
			return st, "", nil, &refusal{400, "invalid_input", fmt.Sprintf("invalid label %q", k)}
		}
	}
	for _, s := range f.servers {
		if s.s.Name == req.Name {
			return st, "", nil, &refusal{409, "uniqueness_error", "server name is already used"}
		}
	}
	if f.serverLimit > 0 && len(f.servers) >= f.serverLimit {
		return st, "", nil, &refusal{403, "resource_limit_exceeded", "server limit exceeded"}
	}
	return st, loc, labels, nil
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// newServer stores a server in "initializing"; called with f.mu held.
func (f *Fake) newServer(name string, st schema.ServerType, image, loc string, labels map[string]string, networks []int64, v4, v6 bool) *server {
	f.nextID++
	id := f.nextID
	img := image
	s := &server{hidden: f.hideReads, s: schema.Server{
		ID: id, Name: name, Status: "initializing", Created: time.Now(), ServerType: st,
		Location: schema.Location{Name: loc}, Image: &schema.Image{Name: &img, Type: "system"},
		Labels: copyMap(labels), PrivateNet: []schema.ServerPrivateNet{}, Volumes: []int64{}, LoadBalancers: []int64{},
	}}
	n := id % 250
	if v4 {
		s.s.PublicNet.IPv4 = schema.ServerPublicNetIPv4{ID: id + 1, IP: fmt.Sprintf("203.0.113.%d", n)}
	}
	if v6 {
		s.s.PublicNet.IPv6 = schema.ServerPublicNetIPv6{ID: id + 2, IP: fmt.Sprintf("2001:db8:%x::/64", id)}
	}
	for _, nid := range networks {
		s.s.PrivateNet = append(s.s.PrivateNet, schema.ServerPrivateNet{Network: nid, IP: fmt.Sprintf("10.0.1.%d", n), AliasIPs: []string{}})
	}
	f.servers[id] = s
	return s
}
