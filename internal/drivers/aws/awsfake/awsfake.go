// Package awsfake is a FAKE of Amazon EC2's public query API, for tests
// only. It was written from AWS's public EC2 API reference (the query
// protocol: form-encoded Action=…&Version=2016-11-15 requests, XML answers
// in the http://ec2.amazonaws.com/doc/2016-11-15/ namespace, errors as
// <Response><Errors><Error><Code>…), not from AWS's code, and it is not
// EC2: it keeps instances in memory and knows only the actions the
// soul-cloud-aws driver uses (RunInstances, DescribeInstances,
// TerminateInstances, StopInstances, StartInstances,
// ModifyInstanceAttribute).
//
// It models what breaks real drivers, each behind a knob a test turns:
//   - asynchronous state: a new or started instance is pending for the
//     first SetPending(n) DescribeInstances that see it, then running (its
//     public address appears then); stopping and shutting-down last one
//     Describe;
//   - eventual consistency: a new instance is missing from the first
//     SetHidden(n) DescribeInstances that would see it (by id: the call
//     fails with InvalidInstanceID.NotFound, as EC2's does);
//   - throttling: Throttle(n) answers the next n requests with
//     RequestLimitExceeded (HTTP 503), counted by Throttled;
//   - quota: SetInstanceLimit(n) refuses RunInstances beyond n live
//     instances with InstanceLimitExceeded, so a batch fails part way;
//   - any other error: FailNext(action, n, status, code);
//   - idempotency tokens: a RunInstances with a known ClientToken returns
//     the instance the token made, in whatever state it is (terminated
//     too), or IdempotentParameterMismatch when the parameters differ;
//   - a create the cloud accepted whose answer never arrives: HoldNextRun;
//   - credentials: SetAccessKey(id) answers AuthFailure to requests signed
//     with another access key id (the SigV4 signature itself is not
//     checked).
//
// It does not model pagination (every Describe is one page), VPCs, volumes
// beyond their tags, or the many other attributes of an instance.
package awsfake

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Instance is the fake's record of an instance.
type Instance struct {
	ID           string
	ImageID      string
	InstanceType string
	State        string
	ClientToken  string
	PrivateIP    string
	PublicIP     string
	SubnetID     string
	Zone         string
	KeyName      string
	UserData     string
	Tags         map[string]string
	// VolumeTags are the tags of the instance's root volume.
	VolumeTags map[string]string
	VolumeSize int

	params  string
	pending int
	hidden  int
}

// Fake is a running fake EC2 endpoint on 127.0.0.1.
type Fake struct {
	// URL is the endpoint to give the SDK (the provider's endpoint).
	URL string
	srv *httptest.Server

	mu        sync.Mutex
	pending   int
	hidden    int
	limit     int
	accessKey string
	throttle  int
	throttled int
	fail      map[string]*failure
	hold      chan struct{}
	instances map[string]*Instance
	order     []string
	tokens    map[string]string
	calls     map[string]int
	next      int
	closed    chan struct{}
}

type failure struct {
	n      int
	status int
	code   string
}

// New starts a fake; Close stops it.
func New() *Fake {
	f := &Fake{
		fail:      map[string]*failure{},
		instances: map[string]*Instance{},
		tokens:    map[string]string{},
		calls:     map[string]int{},
		closed:    make(chan struct{}),
	}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	f.URL = f.srv.URL
	return f
}

// Close stops the fake, releasing held requests.
func (f *Fake) Close() {
	close(f.closed)
	f.srv.CloseClientConnections()
	f.srv.Close()
}

// SetPending sets how many Describes a new or started instance stays pending.
func (f *Fake) SetPending(n int) { f.mu.Lock(); f.pending = n; f.mu.Unlock() }

// FinishPending lets every pending instance run at the next Describe.
func (f *Fake) FinishPending() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, inst := range f.instances {
		inst.pending = 0
	}
}

// SetHidden sets how many Describes a new instance is missing from.
func (f *Fake) SetHidden(n int) { f.mu.Lock(); f.hidden = n; f.mu.Unlock() }

// SetInstanceLimit sets how many live instances RunInstances allows (0: any).
func (f *Fake) SetInstanceLimit(n int) { f.mu.Lock(); f.limit = n; f.mu.Unlock() }

// SetAccessKey makes the fake accept only requests signed with this
// access key id.
func (f *Fake) SetAccessKey(id string) { f.mu.Lock(); f.accessKey = id; f.mu.Unlock() }

// Throttle answers the next n requests with RequestLimitExceeded.
func (f *Fake) Throttle(n int) { f.mu.Lock(); f.throttle = n; f.mu.Unlock() }

// Throttled is how many requests were answered RequestLimitExceeded.
func (f *Fake) Throttled() int { f.mu.Lock(); defer f.mu.Unlock(); return f.throttled }

// FailNext answers the next n calls of action with an error of code and
// HTTP status.
func (f *Fake) FailNext(action string, n, status int, code string) {
	f.mu.Lock()
	f.fail[action] = &failure{n: n, status: status, code: code}
	f.mu.Unlock()
}

// HoldNextRun makes the next RunInstances make its instance and then
// never answer (until the client goes away). The channel is closed once
// the instance is made.
func (f *Fake) HoldNextRun() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hold = make(chan struct{})
	return f.hold
}

// Calls is how many requests of action the fake answered or refused.
func (f *Fake) Calls(action string) int { f.mu.Lock(); defer f.mu.Unlock(); return f.calls[action] }

// Instances returns copies of every instance, in the order they were made.
func (f *Fake) Instances() []Instance {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]Instance, 0, len(f.order))
	for _, id := range f.order {
		out = append(out, f.instances[id].copy())
	}
	return out
}

// Live is how many instances are not terminated or shutting down.
func (f *Fake) Live() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.live()
}

func (f *Fake) live() int {
	n := 0
	for _, inst := range f.instances {
		if inst.State != "terminated" && inst.State != "shutting-down" {
			n++
		}
	}
	return n
}

// Put adds a running instance made outside the driver (another keeper's,
// or a user's) and returns its id.
func (f *Fake) Put(tags map[string]string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	inst := f.newInstance("ami-00000000", "t3.micro")
	inst.State, inst.pending, inst.hidden = "running", 0, 0
	inst.PublicIP = publicIP(len(f.order))
	inst.Tags = tags
	return inst.ID
}

func (i *Instance) copy() Instance {
	c := *i
	c.Tags = clone(i.Tags)
	c.VolumeTags = clone(i.VolumeTags)
	return c
}

func clone(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

func publicIP(n int) string  { return fmt.Sprintf("203.0.113.%d", 10+n) }
func privateIP(n int) string { return fmt.Sprintf("10.0.1.%d", 10+n) }

func (f *Fake) newInstance(image, typ string) *Instance {
	n := len(f.order)
	f.next++
	inst := &Instance{
		ID: fmt.Sprintf("i-%017x", 0xa000+f.next), ImageID: image, InstanceType: typ, State: "pending",
		PrivateIP: privateIP(n), SubnetID: "subnet-0fa4e000000000001", Zone: "eu-central-1a",
		pending: f.pending, hidden: f.hidden, Tags: map[string]string{},
	}
	f.instances[inst.ID] = inst
	f.order = append(f.order, inst.ID)
	return inst
}

// apiError is an EC2 error answer.
type apiError struct {
	status  int
	code    string
	message string
}

var reCredential = regexp.MustCompile(`Credential=([^/,\s]+)/`)

func (f *Fake) serve(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil || r.Method != http.MethodPost {
		writeError(w, &apiError{400, "MalformedQueryString", "the request is not a form-encoded POST"})
		return
	}
	action := r.PostForm.Get("Action")
	f.mu.Lock()
	f.calls[action]++
	body, aerr, hold := f.handle(action, r)
	f.mu.Unlock()
	if hold != nil {
		close(hold)
		select {
		case <-r.Context().Done():
		case <-f.closed:
		}
		return
	}
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>`+"\n"+`<%sResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><requestId>%s</requestId>%s</%sResponse>`,
		action, requestID(r), body, action)
}

func requestID(r *http.Request) string {
	sum := sha256.Sum256([]byte(r.PostForm.Encode()))
	h := hex.EncodeToString(sum[:16])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

func writeError(w http.ResponseWriter, e *apiError) {
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	w.WriteHeader(e.status)
	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>`+"\n"+`<Response><Errors><Error><Code>%s</Code><Message>%s</Message></Error></Errors><RequestID>fake-request</RequestID></Response>`,
		esc(e.code), esc(e.message))
}

func esc(s string) string { return html.EscapeString(s) }

// handle answers one request under f.mu: the XML body of a success, an
// error, or a channel to close when the request is to be held.
func (f *Fake) handle(action string, r *http.Request) (string, *apiError, chan struct{}) {
	if f.throttle > 0 {
		f.throttle--
		f.throttled++
		return "", &apiError{503, "RequestLimitExceeded", "Request limit exceeded."}, nil
	}
	if f.accessKey != "" {
		m := reCredential.FindStringSubmatch(r.Header.Get("Authorization"))
		if m == nil || m[1] != f.accessKey {
			return "", &apiError{401, "AuthFailure", "AWS was not able to validate the provided access credentials"}, nil
		}
	}
	if fl := f.fail[action]; fl != nil && fl.n > 0 {
		fl.n--
		return "", &apiError{fl.status, fl.code, "the fake was told to fail " + action}, nil
	}
	q := r.PostForm
	switch action {
	case "RunInstances":
		return f.run(q)
	case "DescribeInstances":
		b, err := f.describe(q)
		return b, err, nil
	case "TerminateInstances":
		b, err := f.change(q, func(i *Instance) (string, *apiError) {
			if i.State != "terminated" {
				i.State = "shutting-down"
			}
			return i.State, nil
		})
		return b, err, nil
	case "StopInstances":
		b, err := f.change(q, func(i *Instance) (string, *apiError) {
			switch i.State {
			case "running":
				i.State = "stopping"
			case "stopped", "stopping":
			default:
				return "", &apiError{400, "IncorrectInstanceState", "The instance '" + i.ID + "' is not in a state from which it can be stopped."}
			}
			return i.State, nil
		})
		return b, err, nil
	case "StartInstances":
		b, err := f.change(q, func(i *Instance) (string, *apiError) {
			switch i.State {
			case "stopped":
				i.State, i.pending, i.PublicIP = "pending", f.pending, ""
			case "running", "pending":
			default:
				return "", &apiError{400, "IncorrectInstanceState", "The instance '" + i.ID + "' is not in a state from which it can be started."}
			}
			return i.State, nil
		})
		return b, err, nil
	case "ModifyInstanceAttribute":
		b, err := f.modify(q)
		return b, err, nil
	}
	return "", &apiError{400, "InvalidAction", "The action " + action + " is not valid for this web service."}, nil
}

// indexed returns the values of prefix.1, prefix.2, … in order.
func indexed(q url.Values, prefix string) []string {
	var out []string
	for i := 1; ; i++ {
		v, ok := q[prefix+"."+strconv.Itoa(i)]
		if !ok {
			return out
		}
		out = append(out, v[0])
	}
}

func tagSpecs(q url.Values, resource string) map[string]string {
	for s := 1; ; s++ {
		p := "TagSpecification." + strconv.Itoa(s)
		rt, ok := q[p+".ResourceType"]
		if !ok {
			return nil
		}
		if rt[0] != resource {
			continue
		}
		tags := map[string]string{}
		for t := 1; ; t++ {
			k, ok := q[p+".Tag."+strconv.Itoa(t)+".Key"]
			if !ok {
				return tags
			}
			tags[k[0]] = q.Get(p + ".Tag." + strconv.Itoa(t) + ".Value")
		}
	}
}

func (f *Fake) run(q url.Values) (string, *apiError, chan struct{}) {
	image, typ := q.Get("ImageId"), q.Get("InstanceType")
	if !strings.HasPrefix(image, "ami-") {
		return "", &apiError{400, "InvalidAMIID.Malformed", fmt.Sprintf("Invalid id: %q (expecting \"ami-...\")", image)}, nil
	}
	if typ == "" {
		return "", &apiError{400, "MissingParameter", "The request must contain the parameter InstanceType"}, nil
	}
	count, _ := strconv.Atoi(q.Get("MaxCount"))
	if count < 1 {
		return "", &apiError{400, "InvalidParameterValue", "MaxCount must be at least 1"}, nil
	}
	// Every parameter but the token takes part in the idempotency check.
	params := url.Values{}
	for k, v := range q {
		if k != "ClientToken" {
			params[k] = v
		}
	}
	token := q.Get("ClientToken")
	if id, ok := f.tokens[token]; ok && token != "" {
		inst := f.instances[id]
		if inst.params != params.Encode() {
			return "", &apiError{400, "IdempotentParameterMismatch", "The client token you have provided is associated with a resource that has different parameters."}, nil
		}
		return reservation(inst, "instancesSet"), nil, nil
	}
	if f.limit > 0 && f.live()+count > f.limit {
		return "", &apiError{400, "InstanceLimitExceeded", fmt.Sprintf("You have requested more instances (%d) than your current instance limit of %d allows for the specified instance type.", f.live()+count, f.limit)}, nil
	}
	var made []*Instance
	for range count {
		inst := f.newInstance(image, typ)
		inst.ClientToken, inst.params = token, params.Encode()
		inst.SubnetID = cmpOr(q.Get("SubnetId"), inst.SubnetID)
		inst.Zone = cmpOr(q.Get("Placement.AvailabilityZone"), inst.Zone)
		inst.KeyName, inst.UserData = q.Get("KeyName"), q.Get("UserData")
		inst.VolumeSize, _ = strconv.Atoi(q.Get("BlockDeviceMapping.1.Ebs.VolumeSize"))
		inst.Tags = cmpOrMap(tagSpecs(q, "instance"))
		inst.VolumeTags = cmpOrMap(tagSpecs(q, "volume"))
		made = append(made, inst)
	}
	if token != "" {
		f.tokens[token] = made[0].ID
	}
	if f.hold != nil {
		h := f.hold
		f.hold = nil
		return "", nil, h
	}
	var b strings.Builder
	fmt.Fprintf(&b, "<reservationId>r-%s</reservationId><ownerId>123456789012</ownerId><instancesSet>", made[0].ID[2:])
	for _, inst := range made {
		b.WriteString(item(inst))
	}
	b.WriteString("</instancesSet>")
	return b.String(), nil, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func cmpOrMap(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

func reservation(inst *Instance, set string) string {
	return fmt.Sprintf("<reservationId>r-%s</reservationId><ownerId>123456789012</ownerId><%s>%s</%s>", inst.ID[2:], set, item(inst), set)
}

var stateCodes = map[string]int{"pending": 0, "running": 16, "shutting-down": 32, "terminated": 48, "stopping": 64, "stopped": 80}

func item(inst *Instance) string {
	var b strings.Builder
	fmt.Fprintf(&b, "<item><instanceId>%s</instanceId><imageId>%s</imageId><instanceState><code>%d</code><name>%s</name></instanceState>",
		inst.ID, esc(inst.ImageID), stateCodes[inst.State], inst.State)
	fmt.Fprintf(&b, "<instanceType>%s</instanceType><clientToken>%s</clientToken><placement><availabilityZone>%s</availabilityZone></placement>",
		esc(inst.InstanceType), esc(inst.ClientToken), esc(inst.Zone))
	if inst.State != "terminated" {
		fmt.Fprintf(&b, "<privateIpAddress>%s</privateIpAddress><subnetId>%s</subnetId><vpcId>vpc-0fa4e000000000001</vpcId>", inst.PrivateIP, esc(inst.SubnetID))
	}
	if inst.PublicIP != "" && inst.State == "running" {
		fmt.Fprintf(&b, "<ipAddress>%s</ipAddress>", inst.PublicIP)
	}
	if inst.KeyName != "" {
		fmt.Fprintf(&b, "<keyName>%s</keyName>", esc(inst.KeyName))
	}
	b.WriteString("<tagSet>")
	keys := make([]string, 0, len(inst.Tags))
	for k := range inst.Tags {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "<item><key>%s</key><value>%s</value></item>", esc(k), esc(inst.Tags[k]))
	}
	b.WriteString("</tagSet></item>")
	return b.String()
}

// advance moves an instance one Describe along its life.
func (f *Fake) advance(inst *Instance) {
	switch inst.State {
	case "pending":
		if inst.pending > 0 {
			inst.pending--
			return
		}
		inst.State = "running"
		inst.PublicIP = publicIP(slices.Index(f.order, inst.ID))
	case "stopping":
		inst.State, inst.PublicIP = "stopped", ""
	case "shutting-down":
		inst.State = "terminated"
	}
}

var reInstanceID = regexp.MustCompile(`^i-[0-9a-f]{8,17}$`)

// lookup finds instances by id the way EC2 does: a malformed or unknown
// id fails the whole call.
func (f *Fake) lookup(ids []string) ([]*Instance, *apiError) {
	var out []*Instance
	for _, id := range ids {
		if !reInstanceID.MatchString(id) {
			return nil, &apiError{400, "InvalidInstanceID.Malformed", fmt.Sprintf("Invalid id: %q", id)}
		}
		inst, ok := f.instances[id]
		if !ok {
			return nil, &apiError{400, "InvalidInstanceID.NotFound", fmt.Sprintf("The instance ID '%s' does not exist", id)}
		}
		out = append(out, inst)
	}
	return out, nil
}

func (f *Fake) describe(q url.Values) (string, *apiError) {
	ids := indexed(q, "InstanceId")
	var insts []*Instance
	if len(ids) > 0 {
		found, err := f.lookup(ids)
		if err != nil {
			return "", err
		}
		var hidden []string
		for _, inst := range found {
			if inst.hidden > 0 {
				inst.hidden--
				hidden = append(hidden, inst.ID)
			}
		}
		if len(hidden) > 0 {
			return "", &apiError{400, "InvalidInstanceID.NotFound", fmt.Sprintf("The instance IDs '%s' do not exist", strings.Join(hidden, ", "))}
		}
		insts = found
	} else {
		for _, id := range f.order {
			inst := f.instances[id]
			if inst.hidden > 0 {
				inst.hidden--
				continue
			}
			insts = append(insts, inst)
		}
	}
	for _, inst := range insts {
		f.advance(inst)
	}
	filters := map[string][]string{}
	for i := 1; ; i++ {
		p := "Filter." + strconv.Itoa(i)
		name, ok := q[p+".Name"]
		if !ok {
			break
		}
		filters[name[0]] = indexed(q, p+".Value")
	}
	var b strings.Builder
	b.WriteString("<reservationSet>")
	for _, inst := range insts {
		if matches(inst, filters) {
			fmt.Fprintf(&b, "<item>%s</item>", reservation(inst, "instancesSet"))
		}
	}
	b.WriteString("</reservationSet>")
	return b.String(), nil
}

func matches(inst *Instance, filters map[string][]string) bool {
	for name, values := range filters {
		var have []string
		switch {
		case name == "instance-state-name":
			have = []string{inst.State}
		case name == "client-token":
			have = []string{inst.ClientToken}
		case name == "instance-id":
			have = []string{inst.ID}
		case name == "tag-key":
			for k := range inst.Tags {
				have = append(have, k)
			}
		case strings.HasPrefix(name, "tag:"):
			v, ok := inst.Tags[strings.TrimPrefix(name, "tag:")]
			if !ok {
				return false
			}
			have = []string{v}
		default:
			return false
		}
		if !slices.ContainsFunc(have, func(h string) bool { return slices.Contains(values, h) }) {
			return false
		}
	}
	return true
}

func (f *Fake) change(q url.Values, to func(*Instance) (string, *apiError)) (string, *apiError) {
	insts, err := f.lookup(indexed(q, "InstanceId"))
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("<instancesSet>")
	for _, inst := range insts {
		prev := inst.State
		cur, err := to(inst)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "<item><instanceId>%s</instanceId><currentState><code>%d</code><name>%s</name></currentState><previousState><code>%d</code><name>%s</name></previousState></item>",
			inst.ID, stateCodes[cur], cur, stateCodes[prev], prev)
	}
	b.WriteString("</instancesSet>")
	return b.String(), nil
}

func (f *Fake) modify(q url.Values) (string, *apiError) {
	insts, err := f.lookup([]string{q.Get("InstanceId")})
	if err != nil {
		return "", err
	}
	inst := insts[0]
	typ := q.Get("InstanceType.Value")
	if typ == "" {
		return "", &apiError{400, "InvalidParameterCombination", "the fake modifies only InstanceType"}
	}
	if inst.State != "stopped" {
		return "", &apiError{400, "IncorrectInstanceState", "The instance '" + inst.ID + "' is not in the 'stopped' state."}
	}
	inst.InstanceType = typ
	return "<return>true</return>", nil
}
