// Package nubesfake is a FAKE of Nubes' deck-api, for tests and for
// trying the nubes driver without an account. It is written from what the
// public source of Nubes' own Terraform provider shows of the API
// (../shared/notes/nubes-deck-api.md in the project's notes, and
// docs/drivers/nubes.md): it is not Nubes, was never checked against it,
// and a driver passing its tests has been tested against this model of
// the API, not against the cloud.
//
// It serves, under /api/v1/index.cfm:
//
//	GET/POST   /instances                  (page, size; {results: []})
//	GET        /instances/{uid}
//	POST       /instanceOperations         ({instanceUid, operation})
//	GET        /instanceOperations/{uid}   (with cfsParams and stages)
//	GET        /instanceOperations/{uid}/validate-cfs
//	POST       /instanceOperations/{uid}/run
//	POST       /instanceOperationCfsParams, PUT /instanceOperationCfsParams/{uid}
//
// and models what the provider's code shows, each behind a knob tests
// turn:
//   - asynchronous operations: a run operation is pending for
//     PendingReads reads of it, in progress for ProgressReads, then
//     finished (dtFinish, isSuccessful, its stages);
//   - a new VM is "deploying" for BootReads reads of its instance after
//     its create finished, then "running" with its address in
//     state.params[AddressKey];
//   - parameter discovery: a new operation lists its service's
//     parameters with their defaults; values are strings;
//   - 422 "Concurrent operations" while another operation of the instance
//     is pending or in progress;
//   - 401 for a token that is not Token (Expire makes the current one
//     expired), 404 for a gone instance or operation;
//   - delete: the instance goes; with DeletedQuirk (the default) the
//     delete operation itself then ends isSuccessful false with errorLog
//     "Услуга удалена" ("service deleted"), which a client must take as
//     success; suspend quarantines it (status "suspended", still listed);
//   - injected failures: FailStage makes the next create's named stage
//     fail (with an errorLog), NeverRunning keeps the next VM deploying,
//     Throttle(n) answers the next n requests 429.
//
// Reads advance state (not wall-clock time), so tests are deterministic.
package nubesfake

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Base is the path the fake serves the API under.
const Base = "/api/v1/index.cfm"

// AddressKey is the key of a running VM's state.params the fake puts its
// address under.
const AddressKey = "vmIpAddress"

// DeletedMessage is the follow-up operation's message after a delete.
const DeletedMessage = "Услуга удалена"

// The VM service's create parameters, as the provider's source names them.
var vmParams = []param{
	{407, "vappUid", "", "string"}, {408, "vmName", "", "string"}, {409, "vmCpu", "1", "int"},
	{410, "vmRam", "1", "int"}, {411, "vmDisk", "", "int"}, {412, "ipSpaceName", "no-needed", "string"},
	{413, "accessIpList", "[]", "json"}, {414, "imageVm", "Debian_13-20G", "string"}, {415, "cloudInit", "", "string"},
	{416, "userLogin", "", "string"}, {417, "userPublicKey", "", "string"}, {448, "accessPortList", "[]", "json"},
	{449, "needAddZabbixTemplate", "false", "bool"},
}

type param struct {
	id       int
	name     string
	def      string
	dataType string
}

// Machine is the VM behind an instance, when the fake backs its VMs with
// real ones (Machines): its address.
type Machine struct{ Address string }

// Machines makes and removes the VMs behind the fake's instances; nil:
// no real VM, an address from 10.77.0.0/16.
type Machines interface {
	Create(name string, params map[string]string) (Machine, error)
	Destroy(name string) error
}

// Fake is a running fake deck-api.
type Fake struct {
	URL string // the API's base URL (…/api/v1/index.cfm)

	// Knobs; set them before the first request or under Lock.
	PendingReads, ProgressReads, BootReads int
	DeletedQuirk                           bool
	Machines                               Machines

	srv *httptest.Server

	mu        sync.Mutex
	token     string
	expired   map[string]bool
	seq       int
	instances map[string]*instance
	ops       map[string]*operation
	throttle  int
	failStage string
	neverRun  bool
	requests  int
}

type instance struct {
	uid, name, descr string
	service          int
	status           string
	bootReads        int
	params           map[string]string
	running          string // the uid of the operation running on it
	neverRun         bool
}

type operation struct {
	uid, instance, op string
	params            map[int]*setParam
	ran               bool
	reads             int
	finished          *time.Time
	successful        *bool
	errorLog          string
	stages            []stage
	failStage         string
}

type setParam struct {
	uid   string
	value string
}

type stage struct {
	Name       string `json:"stage"`
	Successful *bool  `json:"isSuccessful"`
	Message    string `json:"stageMsg"`
}

// New starts a fake on 127.0.0.1 that accepts token; Close stops it.
func New(token string) *Fake {
	f, err := Listen("127.0.0.1:0", token)
	if err != nil {
		panic(err)
	}
	return f
}

// Listen starts a fake on addr (host:port) that accepts token.
func Listen(addr, token string) (*Fake, error) {
	f := &Fake{token: token, expired: map[string]bool{}, instances: map[string]*instance{}, ops: map[string]*operation{},
		PendingReads: 1, ProgressReads: 2, BootReads: 2, DeletedQuirk: true}
	f.srv = httptest.NewUnstartedServer(f)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	f.srv.Listener = l
	f.srv.Start()
	f.URL = f.srv.URL + Base
	return f, nil
}

// Close stops the fake.
func (f *Fake) Close() { f.srv.Close() }

// Expire refuses the current token from now on and accepts next.
func (f *Fake) Expire(next string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.expired[f.token] = true
	f.token = next
}

// Throttle answers the next n requests 429.
func (f *Fake) Throttle(n int) { f.mu.Lock(); f.throttle = n; f.mu.Unlock() }

// FailStage makes the next create fail at its stage name.
func (f *Fake) FailStage(name string) { f.mu.Lock(); f.failStage = name; f.mu.Unlock() }

// NeverRunning keeps the next created VM deploying for good.
func (f *Fake) NeverRunning() { f.mu.Lock(); f.neverRun = true; f.mu.Unlock() }

// Requests is how many requests the fake answered.
func (f *Fake) Requests() int { f.mu.Lock(); defer f.mu.Unlock(); return f.requests }

// Instances returns the uids of the instances that exist, by uid.
func (f *Fake) Instances() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for uid := range f.instances {
		out = append(out, uid)
	}
	sort.Strings(out)
	return out
}

func (f *Fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests++
	if f.throttle > 0 {
		f.throttle--
		answer(w, http.StatusTooManyRequests, map[string]any{"message": "Too many requests"})
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+f.token {
		answer(w, http.StatusUnauthorized, map[string]any{"message": "Unauthorized: the token is not valid or has expired"})
		return
	}
	p, ok := strings.CutPrefix(r.URL.Path, Base)
	if !ok {
		answer(w, http.StatusNotFound, map[string]any{"message": "not found"})
		return
	}
	parts := strings.Split(strings.Trim(p, "/"), "/")
	switch {
	case len(parts) == 1 && parts[0] == "instances" && r.Method == http.MethodGet:
		f.list(w, r)
	case len(parts) == 1 && parts[0] == "instances" && r.Method == http.MethodPost:
		f.createInstance(w, r)
	case len(parts) == 2 && parts[0] == "instances" && r.Method == http.MethodGet:
		f.getInstance(w, parts[1])
	case len(parts) == 1 && parts[0] == "instanceOperations" && r.Method == http.MethodPost:
		f.createOperation(w, r)
	case len(parts) == 2 && parts[0] == "instanceOperations" && r.Method == http.MethodGet:
		f.getOperation(w, parts[1])
	case len(parts) == 3 && parts[0] == "instanceOperations" && parts[2] == "validate-cfs" && r.Method == http.MethodGet:
		f.validate(w, parts[1])
	case len(parts) == 3 && parts[0] == "instanceOperations" && parts[2] == "run" && r.Method == http.MethodPost:
		f.run(w, parts[1])
	case len(parts) == 1 && parts[0] == "instanceOperationCfsParams" && r.Method == http.MethodPost:
		f.setParam(w, r, "")
	case len(parts) == 2 && parts[0] == "instanceOperationCfsParams" && r.Method == http.MethodPut:
		f.setParam(w, r, parts[1])
	default:
		answer(w, http.StatusNotFound, map[string]any{"message": "no route " + r.Method + " " + r.URL.Path})
	}
}

func answer(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if v != nil {
		_ = json.NewEncoder(w).Encode(v)
	}
}

// next is a new uid (the deck-api's are UUIDs); prefix tells the kinds
// apart in its third group.
func (f *Fake) next(prefix string) string {
	f.seq++
	kind := map[string]string{"inst": "4001", "op": "4002", "par": "4003"}[prefix]
	return fmt.Sprintf("%08x-0000-%s-8000-%012x", f.seq, kind, f.seq)
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(v); err != nil {
		answer(w, http.StatusBadRequest, map[string]any{"message": "the body is not JSON: " + err.Error()})
		return false
	}
	return true
}

func (f *Fake) list(w http.ResponseWriter, r *http.Request) {
	page, _ := strconv.Atoi(r.URL.Query().Get("page"))
	size, _ := strconv.Atoi(r.URL.Query().Get("size"))
	if page < 1 {
		page = 1
	}
	if size < 1 {
		size = 20
	}
	var uids []string
	for uid := range f.instances {
		uids = append(uids, uid)
	}
	sort.Strings(uids)
	results := []map[string]any{}
	for i := (page - 1) * size; i < len(uids) && i < page*size; i++ {
		in := f.instances[uids[i]]
		results = append(results, map[string]any{"instanceUid": in.uid, "displayName": in.name, "serviceId": in.service, "svc": serviceName(in.service)})
	}
	answer(w, http.StatusOK, map[string]any{"results": results})
}

func serviceName(id int) string {
	switch id {
	case 28:
		return "vm"
	case 26:
		return "vapp"
	}
	return "service-" + strconv.Itoa(id)
}

func (f *Fake) createInstance(w http.ResponseWriter, r *http.Request) {
	var in struct {
		ServiceID   int    `json:"serviceId"`
		DisplayName string `json:"displayName"`
		Descr       string `json:"descr"`
	}
	if !decode(w, r, &in) {
		return
	}
	if in.ServiceID <= 0 || in.DisplayName == "" {
		answer(w, http.StatusBadRequest, map[string]any{"message": "serviceId and displayName are required"})
		return
	}
	uid := f.next("inst")
	f.instances[uid] = &instance{uid: uid, name: in.DisplayName, descr: in.Descr, service: in.ServiceID, status: "new", params: map[string]string{}}
	w.Header().Set("Location", Base+"/instances/"+uid)
	answer(w, http.StatusCreated, nil)
}

func (f *Fake) getInstance(w http.ResponseWriter, uid string) {
	in := f.instances[uid]
	if in == nil {
		answer(w, http.StatusNotFound, map[string]any{"message": "instance " + uid + " not found"})
		return
	}
	if in.status == "deploying" && !in.neverRun {
		if in.bootReads++; in.bootReads > f.BootReads {
			in.status = "running"
		}
	}
	params := map[string]any{}
	for k, v := range in.params {
		params[k] = v
	}
	if in.status != "running" {
		delete(params, AddressKey)
	}
	op := f.ops[in.running]
	ops := []map[string]any{}
	for i, name := range []string{"modify", "suspend", "delete"} {
		ops = append(ops, map[string]any{"svcOperationId": 100 + i, "operation": name})
	}
	answer(w, http.StatusOK, map[string]any{"instance": map[string]any{
		"instanceUid": in.uid, "displayName": in.name, "descr": in.descr, "serviceId": in.service,
		"status": in.status, "explainedStatus": in.status,
		"operationIsInProgress": op != nil && op.ran && op.reads > f.PendingReads,
		"operationIsPending":    op != nil && op.ran && op.reads <= f.PendingReads,
		"availableOperations":   ops, "state": map[string]any{"params": params},
	}})
}

func (f *Fake) createOperation(w http.ResponseWriter, r *http.Request) {
	var in struct {
		InstanceUID string `json:"instanceUid"`
		Operation   string `json:"operation"`
	}
	if !decode(w, r, &in) {
		return
	}
	inst := f.instances[in.InstanceUID]
	if inst == nil {
		answer(w, http.StatusNotFound, map[string]any{"message": "instance " + in.InstanceUID + " not found"})
		return
	}
	switch in.Operation {
	case "create", "modify", "suspend", "delete":
	default:
		answer(w, http.StatusBadRequest, map[string]any{"message": "unknown operation " + in.Operation})
		return
	}
	if op := f.ops[inst.running]; op != nil && op.finished == nil {
		answer(w, http.StatusUnprocessableEntity, map[string]any{"message": "Concurrent operations are not allowed: operation " + op.uid + " is running"})
		return
	}
	uid := f.next("op")
	op := &operation{uid: uid, instance: inst.uid, op: in.Operation, params: map[int]*setParam{}}
	if in.Operation == "create" {
		op.failStage, f.failStage = f.failStage, ""
	}
	if in.Operation == "modify" {
		// A modify starts from the VM's current values.
		for _, p := range vmParams {
			if v, ok := inst.params[p.name]; ok {
				op.params[p.id] = &setParam{uid: f.next("par"), value: v}
			}
		}
	}
	f.ops[uid] = op
	w.Header().Set("Location", Base+"/instanceOperations/"+uid)
	answer(w, http.StatusCreated, map[string]any{"instanceOperationUid": uid})
}

func (f *Fake) opParams(op *operation) []map[string]any {
	if op.op != "create" && op.op != "modify" {
		return []map[string]any{}
	}
	var out []map[string]any
	for _, p := range vmParams {
		m := map[string]any{"svcOperationCfsParamId": p.id, "svcOperationCfsParam": p.name, "defaultValue": p.def, "dataType": p.dataType}
		if s := op.params[p.id]; s != nil {
			m["instanceOperationCfsParamUid"], m["paramValue"] = s.uid, s.value
		}
		out = append(out, m)
	}
	return out
}

func (f *Fake) getOperation(w http.ResponseWriter, uid string) {
	op := f.ops[uid]
	if op == nil {
		answer(w, http.StatusNotFound, map[string]any{"message": "operation " + uid + " not found"})
		return
	}
	if op.ran && op.finished == nil {
		if op.reads++; op.reads > f.PendingReads+f.ProgressReads {
			f.finish(op)
		}
	}
	answer(w, http.StatusOK, map[string]any{"instanceOperation": map[string]any{
		"instanceOperationUid": op.uid, "instanceUid": op.instance, "operation": op.op,
		"isPending": op.ran && op.finished == nil && op.reads <= f.PendingReads, "isInProgress": op.ran && op.finished == nil && op.reads > f.PendingReads,
		"dtFinish": op.finished, "isSuccessful": op.successful, "errorLog": op.errorLog, "stages": op.stages,
		"cfsParams": f.opParams(op),
	}})
}

func (f *Fake) validate(w http.ResponseWriter, uid string) {
	op := f.ops[uid]
	if op == nil {
		answer(w, http.StatusNotFound, map[string]any{"message": "operation " + uid + " not found"})
		return
	}
	if op.op == "create" {
		for _, name := range []string{"vappUid", "vmName"} {
			if f.value(op, name) == "" {
				answer(w, http.StatusUnprocessableEntity, map[string]any{"message": "Parameter " + name + " не заполнена (is not filled in)"})
				return
			}
		}
	}
	answer(w, http.StatusOK, map[string]any{"valid": true})
}

func (f *Fake) run(w http.ResponseWriter, uid string) {
	op := f.ops[uid]
	if op == nil {
		answer(w, http.StatusNotFound, map[string]any{"message": "operation " + uid + " not found"})
		return
	}
	inst := f.instances[op.instance]
	if inst == nil {
		answer(w, http.StatusNotFound, map[string]any{"message": "instance " + op.instance + " not found"})
		return
	}
	if cur := f.ops[inst.running]; cur != nil && cur.finished == nil && cur != op {
		answer(w, http.StatusUnprocessableEntity, map[string]any{"message": "Concurrent operations are not allowed: operation " + cur.uid + " is running"})
		return
	}
	if !op.ran {
		op.ran = true
		inst.running = op.uid
	}
	answer(w, http.StatusOK, map[string]any{"instanceOperationUid": op.uid})
}

func (f *Fake) setParam(w http.ResponseWriter, r *http.Request, puid string) {
	var in struct {
		OpUID string `json:"instanceOperationUid"`
		ID    int    `json:"svcOperationCfsParamId"`
		Value string `json:"paramValue"`
	}
	if !decode(w, r, &in) {
		return
	}
	op := f.ops[in.OpUID]
	if op == nil {
		answer(w, http.StatusNotFound, map[string]any{"message": "operation " + in.OpUID + " not found"})
		return
	}
	if op.ran {
		answer(w, http.StatusUnprocessableEntity, map[string]any{"message": "the operation has run: its parameters are fixed"})
		return
	}
	known := false
	for _, p := range vmParams {
		known = known || p.id == in.ID
	}
	if !known {
		answer(w, http.StatusBadRequest, map[string]any{"message": "unknown parameter " + strconv.Itoa(in.ID)})
		return
	}
	if puid == "" {
		puid = f.next("par")
	}
	op.params[in.ID] = &setParam{uid: puid, value: in.Value}
	answer(w, http.StatusCreated, map[string]any{"instanceOperationCfsParamUid": puid})
}

// value is an operation's value of a parameter, or its default.
func (f *Fake) value(op *operation, name string) string {
	for _, p := range vmParams {
		if p.name == name {
			if s := op.params[p.id]; s != nil {
				return s.value
			}
			return p.def
		}
	}
	return ""
}

// finish ends an operation and applies it to its instance.
func (f *Fake) finish(op *operation) {
	now := time.Now().UTC()
	op.finished = &now
	ok, failed := true, false
	inst := f.instances[op.instance]
	names := map[string][]string{"create": {"validate", "deploy", "configure"}, "modify": {"validate", "reconfigure"},
		"suspend": {"quarantine"}, "delete": {"undeploy", "remove"}}[op.op]
	for _, name := range names {
		st := stage{Name: name, Successful: &ok, Message: "done"}
		if name == op.failStage {
			st = stage{Name: name, Successful: &failed, Message: "stage " + name + " failed: vCloud Director refused the request"}
			op.stages = append(op.stages, st)
			op.successful, op.errorLog = &failed, "Jenkins job failed at stage "+name
			return
		}
		op.stages = append(op.stages, st)
	}
	op.successful = &ok
	if inst == nil {
		return
	}
	switch op.op {
	case "create", "modify":
		for _, p := range vmParams {
			inst.params[p.name] = f.value(op, p.name)
		}
		if op.op == "create" {
			f.boot(inst)
		}
	case "suspend":
		inst.status = "suspended"
	case "delete":
		if f.Machines != nil {
			_ = f.Machines.Destroy(inst.name)
		}
		delete(f.instances, inst.uid)
		if f.DeletedQuirk {
			// What the provider's code takes as success.
			op.successful, op.errorLog = &failed, DeletedMessage
		}
	}
}

// boot gives a created instance its VM: deploying, then running.
func (f *Fake) boot(inst *instance) {
	inst.status, inst.bootReads = "deploying", 0
	inst.neverRun, f.neverRun = f.neverRun, false
	addr := fmt.Sprintf("10.77.%d.%d", f.seq/250, f.seq%250+2)
	if f.Machines != nil {
		m, err := f.Machines.Create(inst.name, inst.params)
		if err != nil {
			inst.status = "error: " + err.Error()
			return
		}
		addr = m.Address
	}
	inst.params[AddressKey] = addr
}
