// Package openstackfake is a FAKE of the OpenStack APIs the openstack
// driver uses — Keystone v3 tokens, Nova servers, flavors and instance
// actions, Neutron ports and floating IPs — for tests only. It was
// written from the public API references (docs.openstack.org api-ref for
// identity v3, compute v2.1 and networking v2.0): the paths, the JSON
// shapes of requests and answers, the status codes and the error bodies
// ({"itemNotFound": {...}}, {"forbidden": {...}}, {"overLimit": {...}},
// Keystone's {"error": {...}}, Neutron's {"NeutronError": {...}}). It is
// not OpenStack and it says nothing about how a real cloud behaves
// beyond that.
//
// It models what breaks real drivers, each behind a knob:
//   - asynchronous state: a server is BUILD until ActiveAfter has passed,
//     a resize is RESIZE before VERIFY_RESIZE;
//   - eventual consistency: a new server is missing (404) from its first
//     HideNew GETs;
//   - throttling: Throttle(n) answers the next n compute or network
//     requests 429 overLimit with Retry-After, counted by Throttled;
//   - transient failures: Unavailable(method, n) answers 503 with an
//     HTML body, as a load balancer in front of restarting API nodes;
//   - quota: Quota caps the live servers; a create past it answers 403
//     "Quota exceeded for instances", so a batch fails part way;
//   - a server that goes to ERROR (FailBuild);
//   - a create the cloud accepted but did not answer yet (HoldCreates):
//     the server exists, its POST hangs until released;
//   - bad credentials: 401 from Keystone, and 401 for unknown tokens.
//
// Idempotency is not the cloud's: Nova has no client token, so the
// driver finds its servers by metadata, which the fake stores and lists
// as Nova does.
package openstackfake

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"time"
)

// User is a Keystone user or application credential the fake accepts.
type User struct {
	Name, Password, Project  string
	AppCredID, AppCredSecret string
}

// Flavor is a Nova flavor.
type Flavor struct{ ID, Name string }

// Server is the fake's record of a Nova server.
type Server struct {
	ID, Name, Status, Flavor, Image, Network, Zone, KeyName string
	Metadata                                                map[string]string
	UserData                                                string
	FixedIP, FloatingIP                                     string
	VolumeSizeGB                                            int
	Created                                                 time.Time

	activeAt time.Time
	hidden   int
	deleted  bool
	resizeTo string
	failed   bool
}

// Fake is a running fake cloud.
type Fake struct {
	URL    string // the Keystone v3 URL: http://127.0.0.1:port/identity/v3
	Region string

	srv *httptest.Server

	mu          sync.Mutex
	users       []User
	tokens      map[string]bool
	flavors     []Flavor
	images      map[string]bool
	networks    map[string]string // id -> name
	servers     map[string]*Server
	order       []string
	fips        map[string]map[string]string // id -> floating IP record
	nextIP      int
	activeAfter time.Duration
	hideNew     int
	throttle    int
	throttled   int
	unavailable map[string]int // method -> 503 answers still to give
	served503   int
	quota       int
	failBuild   bool
	hold        bool
	release     chan struct{}
	accepted    chan string
	creates     int
}

// Options set up a fake.
type Options struct {
	Users       []User
	Flavors     []Flavor
	Images      []string
	Networks    map[string]string
	Region      string
	ActiveAfter time.Duration
	HideNew     int
	Quota       int // 0: no limit
}

// Start starts a fake on 127.0.0.1; it stops at t's end through Close.
func Start(o Options) *Fake {
	f := &Fake{
		Region: o.Region, users: o.Users, tokens: map[string]bool{}, flavors: o.Flavors,
		images: map[string]bool{}, networks: o.Networks, servers: map[string]*Server{}, fips: map[string]map[string]string{},
		activeAfter: o.ActiveAfter, hideNew: o.HideNew, quota: o.Quota, release: make(chan struct{}), accepted: make(chan string, 64),
	}
	if f.Region == "" {
		f.Region = "RegionOne"
	}
	for _, i := range o.Images {
		f.images[i] = true
	}
	f.srv = httptest.NewUnstartedServer(http.HandlerFunc(f.serve))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	f.srv.Listener = l
	f.srv.Start()
	f.URL = f.srv.URL + "/identity/v3"
	return f
}

// Close stops the fake, releasing held creates.
func (f *Fake) Close() {
	f.Release()
	f.srv.CloseClientConnections()
	f.srv.Close()
}

// Throttle answers the next n compute and network requests 429.
func (f *Fake) Throttle(n int) { f.mu.Lock(); f.throttle = n; f.mu.Unlock() }

// Unavailable answers the next n compute and network requests with
// method 503, as a cloud whose API nodes restart.
func (f *Fake) Unavailable(method string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.unavailable == nil {
		f.unavailable = map[string]int{}
	}
	f.unavailable[method] = n
}

// Served503 counts the 503 answers given.
func (f *Fake) Served503() int { f.mu.Lock(); defer f.mu.Unlock(); return f.served503 }

// Throttled counts the 429 answers given.
func (f *Fake) Throttled() int { f.mu.Lock(); defer f.mu.Unlock(); return f.throttled }

// SetQuota caps the live servers (0: no cap).
func (f *Fake) SetQuota(n int) { f.mu.Lock(); f.quota = n; f.mu.Unlock() }

// FailBuild makes servers created from now on go to ERROR.
func (f *Fake) FailBuild(on bool) { f.mu.Lock(); f.failBuild = on; f.mu.Unlock() }

// HoldCreates makes every POST /servers store the server and then hang
// until Release; Accepted receives each held server's ID.
func (f *Fake) HoldCreates() {
	f.mu.Lock()
	f.hold = true
	f.release = make(chan struct{})
	f.mu.Unlock()
}

// Release answers the held creates and stops holding.
func (f *Fake) Release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hold {
		f.hold = false
		close(f.release)
	}
}

// Accepted receives the ID of each create accepted while holding.
func (f *Fake) Accepted() <-chan string { return f.accepted }

// Creates counts the POST /servers the fake accepted.
func (f *Fake) Creates() int { f.mu.Lock(); defer f.mu.Unlock(); return f.creates }

// Servers returns the live servers, oldest first.
func (f *Fake) Servers() []Server {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Server
	for _, id := range f.order {
		if s := f.servers[id]; !s.deleted {
			out = append(out, *s)
		}
	}
	return out
}

// FloatingIPs counts the floating IPs.
func (f *Fake) FloatingIPs() int { f.mu.Lock(); defer f.mu.Unlock(); return len(f.fips) }

// AddServer puts a server in the fake as if someone else made it; it is
// ACTIVE at once.
func (f *Fake) AddServer(name string, meta map[string]string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.newServer(name, f.flavors[0].ID, "", firstKey(f.networks), meta)
	s.activeAt = time.Time{}
	s.hidden = 0
	return s.ID
}

func firstKey(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if len(keys) == 0 {
		return ""
	}
	return keys[0]
}

func uuid() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// novaError writes Nova's error shape: {"itemNotFound": {"code": 404, "message": …}}.
func novaError(w http.ResponseWriter, status int, kind, msg string) {
	writeJSON(w, status, map[string]any{kind: map[string]any{"code": status, "message": msg}})
}

func (f *Fake) base() string { return f.srv.URL }

func (f *Fake) serve(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	switch {
	case p == "/identity/v3/auth/tokens" && r.Method == http.MethodPost:
		f.token(w, r)
		return
	case p == "/network/" || p == "/network":
		// Neutron's version document, which clients read to find v2.0.
		writeJSON(w, 200, map[string]any{"versions": []any{map[string]any{"id": "v2.0", "status": "CURRENT",
			"links": []any{map[string]any{"href": f.base() + "/network/v2.0/", "rel": "self"}}}}})
		return
	case strings.HasPrefix(p, "/compute/v2.1/"), strings.HasPrefix(p, "/network/v2.0/"):
	default:
		http.NotFound(w, r)
		return
	}
	f.mu.Lock()
	authed := f.tokens[r.Header.Get("X-Auth-Token")]
	if authed && f.throttle > 0 {
		f.throttle--
		f.throttled++
		f.mu.Unlock()
		w.Header().Set("Retry-After", "0")
		novaError(w, http.StatusTooManyRequests, "overLimit", "This request was rate-limited.")
		return
	}
	if authed && f.unavailable[r.Method] > 0 {
		f.unavailable[r.Method]--
		f.served503++
		f.mu.Unlock()
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("<html><body><h1>503 Service Unavailable</h1>No server is available to handle this request.</body></html>"))
		return
	}
	f.mu.Unlock()
	if !authed {
		writeJSON(w, http.StatusUnauthorized, map[string]any{"error": map[string]any{"code": 401, "title": "Unauthorized", "message": "The request you have made requires authentication."}})
		return
	}
	if strings.HasPrefix(p, "/network/") {
		f.network(w, r, strings.TrimPrefix(p, "/network/v2.0/"))
		return
	}
	f.compute(w, r, strings.TrimPrefix(p, "/compute/v2.1/"))
}

// token serves POST /v3/auth/tokens (password or application_credential).
func (f *Fake) token(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Auth struct {
			Identity struct {
				Methods  []string `json:"methods"`
				Password struct {
					User struct {
						Name     string `json:"name"`
						ID       string `json:"id"`
						Password string `json:"password"`
					} `json:"user"`
				} `json:"password"`
				AppCred struct {
					ID     string `json:"id"`
					Secret string `json:"secret"`
				} `json:"application_credential"`
			} `json:"identity"`
		} `json:"auth"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]any{"code": 400, "title": "Bad Request", "message": "Expecting to find auth in request body."}})
		return
	}
	id := req.Auth.Identity
	var ok bool
	var project string
	for _, u := range f.users {
		if (id.Password.User.Name != "" && u.Name == id.Password.User.Name && u.Password == id.Password.User.Password && u.Password != "") ||
			(id.AppCred.ID != "" && u.AppCredID == id.AppCred.ID && u.AppCredSecret == id.AppCred.Secret) {
			ok, project = true, u.Project
		}
	}
	if !ok {
		writeJSON(w, http.StatusUnauthorized, map[string]any{"error": map[string]any{"code": 401, "title": "Unauthorized", "message": "The request you have made requires authentication."}})
		return
	}
	tok := "gAAAA" + strings.ReplaceAll(uuid(), "-", "")
	f.mu.Lock()
	f.tokens[tok] = true
	f.mu.Unlock()
	ep := func(typ, name, url string) map[string]any {
		var eps []map[string]any
		for _, iface := range []string{"public", "internal", "admin"} {
			eps = append(eps, map[string]any{"id": uuid(), "interface": iface, "region": f.Region, "region_id": f.Region, "url": url})
		}
		return map[string]any{"id": uuid(), "type": typ, "name": name, "endpoints": eps}
	}
	w.Header().Set("X-Subject-Token", tok)
	writeJSON(w, http.StatusCreated, map[string]any{"token": map[string]any{
		"methods":    id.Methods,
		"expires_at": time.Now().Add(time.Hour).UTC().Format("2006-01-02T15:04:05.000000Z"),
		"issued_at":  time.Now().UTC().Format("2006-01-02T15:04:05.000000Z"),
		"user":       map[string]any{"id": "u-1", "name": id.Password.User.Name, "domain": map[string]any{"id": "default", "name": "Default"}},
		"project":    map[string]any{"id": "p-1", "name": project, "domain": map[string]any{"id": "default", "name": "Default"}},
		"catalog": []any{
			ep("identity", "keystone", f.base()+"/identity/v3"),
			ep("compute", "nova", f.base()+"/compute/v2.1"),
			ep("network", "neutron", f.base()+"/network"),
		},
	}})
}

func (f *Fake) compute(w http.ResponseWriter, r *http.Request, p string) {
	parts := strings.Split(strings.Trim(p, "/"), "/")
	switch {
	case len(parts) == 2 && parts[0] == "flavors" && parts[1] == "detail":
		f.mu.Lock()
		out := []any{}
		for _, fl := range f.flavors {
			out = append(out, flavorJSON(fl))
		}
		f.mu.Unlock()
		writeJSON(w, 200, map[string]any{"flavors": out})
	case len(parts) == 2 && parts[0] == "flavors":
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, fl := range f.flavors {
			if fl.ID == parts[1] {
				writeJSON(w, 200, map[string]any{"flavor": flavorJSON(fl)})
				return
			}
		}
		novaError(w, 404, "itemNotFound", fmt.Sprintf("Flavor %s could not be found.", parts[1]))
	case len(parts) == 1 && parts[0] == "servers" && r.Method == http.MethodPost:
		f.createServer(w, r)
	case len(parts) == 2 && parts[0] == "servers" && parts[1] == "detail":
		f.mu.Lock()
		out := []any{}
		for _, id := range f.order {
			if s := f.servers[id]; !s.deleted {
				out = append(out, f.serverJSON(s))
			}
		}
		f.mu.Unlock()
		writeJSON(w, 200, map[string]any{"servers": out})
	case len(parts) == 2 && parts[0] == "servers" && r.Method == http.MethodGet:
		f.mu.Lock()
		defer f.mu.Unlock()
		s := f.servers[parts[1]]
		if s == nil || s.deleted || s.hidden > 0 {
			if s != nil && s.hidden > 0 {
				s.hidden--
			}
			novaError(w, 404, "itemNotFound", fmt.Sprintf("Instance %s could not be found.", parts[1]))
			return
		}
		writeJSON(w, 200, map[string]any{"server": f.serverJSON(s)})
	case len(parts) == 2 && parts[0] == "servers" && r.Method == http.MethodDelete:
		f.mu.Lock()
		defer f.mu.Unlock()
		s := f.servers[parts[1]]
		if s == nil || s.deleted {
			novaError(w, 404, "itemNotFound", fmt.Sprintf("Instance %s could not be found.", parts[1]))
			return
		}
		s.deleted = true
		for id, fip := range f.fips {
			if fip["port_id"] == portID(s.ID) {
				fip["port_id"], fip["fixed_ip_address"] = "", ""
				f.fips[id] = fip
			}
		}
		w.WriteHeader(http.StatusNoContent)
	case len(parts) == 3 && parts[0] == "servers" && parts[2] == "os-instance-actions":
		f.mu.Lock()
		defer f.mu.Unlock()
		s := f.servers[parts[1]]
		if s == nil || (s.deleted && r.Header.Get("X-OpenStack-Nova-API-Version") < "2.21") {
			novaError(w, 404, "itemNotFound", fmt.Sprintf("Instance %s could not be found.", parts[1]))
			return
		}
		acts := []any{map[string]any{"action": "create", "instance_uuid": s.ID, "request_id": "req-" + uuid(), "start_time": s.Created.UTC().Format("2006-01-02T15:04:05.000000")}}
		if s.deleted {
			acts = append(acts, map[string]any{"action": "delete", "instance_uuid": s.ID, "request_id": "req-" + uuid(), "start_time": time.Now().UTC().Format("2006-01-02T15:04:05.000000")})
		}
		writeJSON(w, 200, map[string]any{"instanceActions": acts})
	case len(parts) == 3 && parts[0] == "servers" && parts[2] == "action" && r.Method == http.MethodPost:
		f.action(w, r, parts[1])
	default:
		novaError(w, 404, "itemNotFound", "The resource could not be found.")
	}
}

func flavorJSON(fl Flavor) map[string]any {
	return map[string]any{"id": fl.ID, "name": fl.Name, "vcpus": 1, "ram": 1024, "disk": 10, "os-flavor-access:is_public": true}
}

func portID(serverID string) string { return "port-" + serverID }

func (f *Fake) newServer(name, flavor, image, network string, meta map[string]string) *Server {
	f.nextIP++
	s := &Server{
		ID: uuid(), Name: name, Status: "BUILD", Flavor: flavor, Image: image, Network: network, Metadata: meta,
		FixedIP: fmt.Sprintf("10.0.%d.%d", f.nextIP/250, f.nextIP%250+2), Created: time.Now(),
		activeAt: time.Now().Add(f.activeAfter), hidden: f.hideNew, failed: f.failBuild,
	}
	if s.Metadata == nil {
		s.Metadata = map[string]string{}
	}
	f.servers[s.ID] = s
	f.order = append(f.order, s.ID)
	return s
}

func (f *Fake) live() int {
	n := 0
	for _, s := range f.servers {
		if !s.deleted {
			n++
		}
	}
	return n
}

func (f *Fake) createServer(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Server struct {
			Name      string            `json:"name"`
			ImageRef  string            `json:"imageRef"`
			FlavorRef string            `json:"flavorRef"`
			Metadata  map[string]string `json:"metadata"`
			UserData  string            `json:"user_data"`
			KeyName   string            `json:"key_name"`
			Zone      string            `json:"availability_zone"`
			Networks  []struct {
				UUID string `json:"uuid"`
			} `json:"networks"`
			BDM []struct {
				UUID       string `json:"uuid"`
				VolumeSize int    `json:"volume_size"`
			} `json:"block_device_mapping_v2"`
		} `json:"server"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		novaError(w, 400, "badRequest", "Malformed request body")
		return
	}
	in := req.Server
	image := in.ImageRef
	size := 0
	if len(in.BDM) > 0 {
		image, size = in.BDM[0].UUID, in.BDM[0].VolumeSize
	}
	f.mu.Lock()
	var flavorOK bool
	for _, fl := range f.flavors {
		flavorOK = flavorOK || fl.ID == in.FlavorRef
	}
	switch {
	case in.Name == "":
		f.mu.Unlock()
		novaError(w, 400, "badRequest", "Invalid input for field/attribute name.")
		return
	case !flavorOK:
		f.mu.Unlock()
		novaError(w, 400, "badRequest", fmt.Sprintf("Flavor %s could not be found.", in.FlavorRef))
		return
	case !f.images[image]:
		f.mu.Unlock()
		novaError(w, 400, "badRequest", fmt.Sprintf("Image %s could not be found.", image))
		return
	case len(in.Networks) != 1 || f.networks[in.Networks[0].UUID] == "":
		f.mu.Unlock()
		novaError(w, 400, "badRequest", "Network could not be found.")
		return
	case f.quota > 0 && f.live() >= f.quota:
		used := f.live()
		f.mu.Unlock()
		novaError(w, 403, "forbidden", fmt.Sprintf("Quota exceeded for instances: Requested 1, but already used %d of %d instances", used, f.quota))
		return
	}
	s := f.newServer(in.Name, in.FlavorRef, image, in.Networks[0].UUID, in.Metadata)
	s.UserData, s.KeyName, s.Zone, s.VolumeSizeGB = in.UserData, in.KeyName, in.Zone, size
	f.creates++
	hold, release, id := f.hold, f.release, s.ID
	f.mu.Unlock()
	if hold {
		f.accepted <- id
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"server": map[string]any{
		"id": id, "adminPass": "fake-admin-pass", "OS-DCF:diskConfig": "MANUAL",
		"links":           []any{map[string]any{"rel": "self", "href": f.base() + "/compute/v2.1/servers/" + id}},
		"security_groups": []any{map[string]any{"name": "default"}},
	}})
}

// serverJSON is GET /servers/{id}'s server; it moves the server along
// its states first. Callers hold f.mu.
func (f *Fake) serverJSON(s *Server) map[string]any {
	now := time.Now()
	switch {
	case s.Status == "BUILD" && !now.Before(s.activeAt) && s.failed:
		s.Status = "ERROR"
	case s.Status == "BUILD" && !now.Before(s.activeAt):
		s.Status = "ACTIVE"
	case s.Status == "RESIZE" && !now.Before(s.activeAt):
		s.Status = "VERIFY_RESIZE"
	}
	addrs := []any{}
	if s.Status != "BUILD" && s.Status != "ERROR" {
		addrs = append(addrs, map[string]any{"addr": s.FixedIP, "version": 4, "OS-EXT-IPS:type": "fixed", "OS-EXT-IPS-MAC:mac_addr": "fa:16:3e:00:00:01"})
		if s.FloatingIP != "" {
			addrs = append(addrs, map[string]any{"addr": s.FloatingIP, "version": 4, "OS-EXT-IPS:type": "floating", "OS-EXT-IPS-MAC:mac_addr": "fa:16:3e:00:00:01"})
		}
	}
	out := map[string]any{
		"id": s.ID, "name": s.Name, "status": s.Status, "tenant_id": "p-1", "user_id": "u-1",
		"metadata": s.Metadata, "key_name": s.KeyName, "OS-EXT-AZ:availability_zone": first(s.Zone, "nova"),
		"flavor":    map[string]any{"id": s.Flavor, "links": []any{}},
		"image":     map[string]any{"id": s.Image, "links": []any{}},
		"addresses": map[string]any{f.networks[s.Network]: addrs},
		"created":   s.Created.UTC().Format(time.RFC3339), "updated": now.UTC().Format(time.RFC3339),
		"links": []any{},
	}
	if s.Status == "ERROR" {
		out["fault"] = map[string]any{"code": 500, "message": "No valid host was found. There are not enough hosts available.", "created": now.UTC().Format(time.RFC3339)}
	}
	return out
}

func first(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func (f *Fake) action(w http.ResponseWriter, r *http.Request, id string) {
	var req map[string]json.RawMessage
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		novaError(w, 400, "badRequest", "Malformed request body")
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.servers[id]
	if s == nil || s.deleted {
		novaError(w, 404, "itemNotFound", fmt.Sprintf("Instance %s could not be found.", id))
		return
	}
	f.serverJSON(s) // move its state along
	switch {
	case req["resize"] != nil:
		var rs struct {
			FlavorRef string `json:"flavorRef"`
		}
		_ = json.Unmarshal(req["resize"], &rs)
		if s.Status != "ACTIVE" && s.Status != "SHUTOFF" {
			novaError(w, 409, "conflictingRequest", fmt.Sprintf("Cannot 'resize' instance %s while it is in vm_state %s", id, strings.ToLower(s.Status)))
			return
		}
		if rs.FlavorRef == s.Flavor {
			novaError(w, 400, "badRequest", "When resizing, instances must change flavor!")
			return
		}
		s.Status, s.resizeTo, s.activeAt = "RESIZE", rs.FlavorRef, time.Now().Add(f.activeAfter)
		w.WriteHeader(http.StatusAccepted)
	case req["confirmResize"] != nil:
		if s.Status != "VERIFY_RESIZE" {
			novaError(w, 409, "conflictingRequest", fmt.Sprintf("Cannot 'confirmResize' instance %s while it is in vm_state %s", id, strings.ToLower(s.Status)))
			return
		}
		s.Status, s.Flavor, s.resizeTo = "ACTIVE", s.resizeTo, ""
		w.WriteHeader(http.StatusNoContent)
	default:
		novaError(w, 400, "badRequest", "There is no such action")
	}
}

func neutronError(w http.ResponseWriter, status int, typ, msg string) {
	writeJSON(w, status, map[string]any{"NeutronError": map[string]any{"type": typ, "message": msg, "detail": ""}})
}

func (f *Fake) network(w http.ResponseWriter, r *http.Request, p string) {
	parts := strings.Split(strings.Trim(p, "/"), "/")
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case len(parts) == 1 && parts[0] == "ports" && r.Method == http.MethodGet:
		dev := r.URL.Query().Get("device_id")
		out := []any{}
		if s := f.servers[dev]; s != nil && !s.deleted {
			out = append(out, map[string]any{"id": portID(s.ID), "device_id": s.ID, "device_owner": "compute:nova", "network_id": s.Network,
				"fixed_ips": []any{map[string]any{"ip_address": s.FixedIP, "subnet_id": "subnet-1"}}, "status": "ACTIVE"})
		}
		writeJSON(w, 200, map[string]any{"ports": out})
	case len(parts) == 1 && parts[0] == "floatingips" && r.Method == http.MethodGet:
		port := r.URL.Query().Get("port_id")
		out := []any{}
		for _, fip := range f.fips {
			if port == "" || fip["port_id"] == port {
				out = append(out, fip)
			}
		}
		writeJSON(w, 200, map[string]any{"floatingips": out})
	case len(parts) == 1 && parts[0] == "floatingips" && r.Method == http.MethodPost:
		var req struct {
			FIP struct {
				Network     string `json:"floating_network_id"`
				PortID      string `json:"port_id"`
				Description string `json:"description"`
			} `json:"floatingip"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			neutronError(w, 400, "HTTPBadRequest", "Invalid JSON")
			return
		}
		if f.networks[req.FIP.Network] == "" {
			neutronError(w, 404, "ExternalNetworkNotFound", fmt.Sprintf("External network %s could not be found.", req.FIP.Network))
			return
		}
		var s *Server
		for _, sv := range f.servers {
			if portID(sv.ID) == req.FIP.PortID && !sv.deleted {
				s = sv
			}
		}
		if s == nil {
			neutronError(w, 404, "PortNotFound", fmt.Sprintf("Port %s could not be found.", req.FIP.PortID))
			return
		}
		f.nextIP++
		ip := fmt.Sprintf("203.0.113.%d", f.nextIP%250+2)
		fip := map[string]string{"id": uuid(), "floating_ip_address": ip, "floating_network_id": req.FIP.Network, "port_id": req.FIP.PortID,
			"fixed_ip_address": s.FixedIP, "description": req.FIP.Description, "status": "ACTIVE"}
		f.fips[fip["id"]] = fip
		s.FloatingIP = ip
		writeJSON(w, http.StatusCreated, map[string]any{"floatingip": fip})
	case len(parts) == 2 && parts[0] == "floatingips" && r.Method == http.MethodDelete:
		fip := f.fips[parts[1]]
		if fip == nil {
			neutronError(w, 404, "FloatingIPNotFound", fmt.Sprintf("Floating IP %s could not be found", parts[1]))
			return
		}
		for _, s := range f.servers {
			if portID(s.ID) == fip["port_id"] {
				s.FloatingIP = ""
			}
		}
		delete(f.fips, parts[1])
		w.WriteHeader(http.StatusNoContent)
	default:
		neutronError(w, 404, "HTTPNotFound", "The resource could not be found.")
	}
}
