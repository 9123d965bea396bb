package client

import (
	"encoding/json"
	"fmt"
	"time"
)

// Problem is an RFC 9457 problem document with Soul Stack's stable dotted
// Code. It is also the error the client returns for every non-2xx answer.
type Problem struct {
	Type     string         `json:"type,omitempty" doc:"A URI reference for the problem type (about:blank when none)."`
	Title    string         `json:"title" doc:"The HTTP status text."`
	Status   int            `json:"status" doc:"The HTTP status code."`
	Detail   string         `json:"detail,omitempty" doc:"What went wrong, for a human."`
	Code     string         `json:"code" doc:"Stable dotted code to branch on, e.g. provider.in_use."`
	Instance string         `json:"instance,omitempty" doc:"The request path."`
	Errors   []ProblemError `json:"errors,omitempty" doc:"Where in the input each problem is."`
}

// ProblemError locates one problem in the request.
type ProblemError struct {
	Location string `json:"location" doc:"Where in the request, e.g. body.name, path.name or hello.yaml:3:5."`
	Code     string `json:"code,omitempty" doc:"Stable dotted code of this problem, when it has its own."`
	Message  string `json:"message"`
}

func (p *Problem) Error() string {
	s := fmt.Sprintf("%s (%d): %s", p.Code, p.Status, p.Detail)
	for _, e := range p.Errors {
		if e.Code != "" {
			s += fmt.Sprintf("\n  %s: %s: %s", e.Location, e.Code, e.Message)
			continue
		}
		s += fmt.Sprintf("\n  %s: %s", e.Location, e.Message)
	}
	return s
}

// GetStatus returns the HTTP status.
func (p *Problem) GetStatus() int { return p.Status }

// ContentType makes the server answer application/problem+json.
func (p *Problem) ContentType(ct string) string {
	if ct == "application/json" {
		return "application/problem+json"
	}
	return ct
}

// Provider is a cloud account: a driver, a region and a reference to its
// credentials (never the credentials).
type Provider struct {
	Name           string          `json:"name" doc:"DNS label: lower-case letters, digits and '-', at most 63 characters."`
	Driver         string          `json:"driver" doc:"The CloudDriver plugin, soul-cloud-<driver>."`
	Region         string          `json:"region,omitempty" required:"false"`
	CredentialsRef string          `json:"credentials_ref,omitempty" required:"false" doc:"Reference to the credentials: env:NAME, file:/path or vault:<path>#<field>. Resolved only at use time."`
	FQDNSuffix     string          `json:"fqdn_suffix,omitempty" required:"false" doc:"DNS suffix of the VMs' FQDNs."`
	Config         json.RawMessage `json:"config,omitempty" required:"false" doc:"Driver-specific settings (a JSON object)."`
	Project        string          `json:"project" readOnly:"true" doc:"The project that owns it and its credentials."`
	SharedWith     []string        `json:"shared_with,omitempty" required:"false" readOnly:"true" doc:"Projects that may read and use it (never manage it); shown to its own project and keeper-wide tokens."`
	CreatedAt      time.Time       `json:"created_at" readOnly:"true"`
	CreatedBy      string          `json:"created_by" readOnly:"true" doc:"The actor id (API token id) that created it."`
}

// ProviderCreate is the body of POST /v1/providers.
type ProviderCreate struct {
	Name           string         `json:"name" doc:"DNS label: lower-case letters, digits and '-', at most 63 characters."`
	Driver         string         `json:"driver" doc:"The CloudDriver plugin, soul-cloud-<driver> (a DNS label)."`
	Region         string         `json:"region,omitempty" required:"false"`
	CredentialsRef string         `json:"credentials_ref,omitempty" required:"false" doc:"env:NAME, file:/abs/path or vault:<path>#<field>."`
	FQDNSuffix     string         `json:"fqdn_suffix,omitempty" required:"false" doc:"DNS suffix of the VMs' FQDNs, e.g. local.test."`
	Config         map[string]any `json:"config,omitempty" required:"false" doc:"Driver-specific settings."`
	Project        string         `json:"project,omitempty" required:"false" doc:"The project it goes into: a keeper-wide token's choice (default when absent); a project's token creates in its own project only."`
}

// ProviderList is a page of providers.
type ProviderList struct {
	Items []Provider `json:"items"`
	Next  string     `json:"next" doc:"Cursor for the next page (pass as ?after=); empty on the last page."`
}

// Profile is a VM spec on top of a provider.
type Profile struct {
	Name       string          `json:"name"`
	Provider   string          `json:"provider"`
	Spec       json.RawMessage `json:"spec"`
	Project    string          `json:"project" readOnly:"true" doc:"The project that owns it."`
	SharedWith []string        `json:"shared_with,omitempty" required:"false" readOnly:"true" doc:"Projects that may read and use it."`
	CreatedAt  time.Time       `json:"created_at" readOnly:"true"`
	CreatedBy  string          `json:"created_by" readOnly:"true"`
}

// ProfileCreate is the body of POST /v1/profiles.
type ProfileCreate struct {
	Name     string         `json:"name" doc:"DNS label, at most 63 characters."`
	Provider string         `json:"provider" doc:"Name of a registered provider."`
	Spec     map[string]any `json:"spec" doc:"Backend-specific VM parameters (image, size, network…)."`
	Project  string         `json:"project,omitempty" required:"false" doc:"The project it goes into: a keeper-wide token's choice (default when absent); a project's token creates in its own project only."`
}

// ProfileList is a page of profiles.
type ProfileList struct {
	Items []Profile `json:"items"`
	Next  string    `json:"next"`
}

// Connection says how the keeper reaches a soul.
type Connection struct {
	Transport string `json:"transport,omitempty" enum:"ssh" default:"ssh" required:"false"`
	User      string `json:"user,omitempty" default:"root" required:"false" doc:"SSH user; sudo -n is used when it is not root."`
	Port      int    `json:"port,omitempty" default:"22" minimum:"1" maximum:"65535" required:"false"`
	KeyRef    string `json:"key_ref,omitempty" required:"false" doc:"Reference to the SSH private key: env:NAME, file:/path or vault:<path>#<field>."`
	HostKey   string `json:"host_key,omitempty" required:"false" readOnly:"true" doc:"Host key pinned on first contact."`
}

// Soul is a managed host.
type Soul struct {
	SID          string          `json:"sid"`
	Status       string          `json:"status" enum:"pending,active,unreachable,destroyed"`
	Address      string          `json:"address,omitempty"`
	Provider     string          `json:"provider,omitempty"`
	Project      string          `json:"project" doc:"The project it belongs to: that project's runs alone reach it."`
	VMID         string          `json:"vm_id,omitempty"`
	PrimaryIP    string          `json:"primary_ip,omitempty"`
	Attributes   json.RawMessage `json:"attributes"`
	Connection   Connection      `json:"connection"`
	CreatedByAID *string         `json:"created_by_aid" doc:"Actor that registered it; null for keeper-internal actions."`
	CreatedAt    time.Time       `json:"created_at"`
	UpdatedAt    time.Time       `json:"updated_at"`
	LastSeenAt   *time.Time      `json:"last_seen_at" doc:"When a command last ran on it (recorded at most once per run); null before the first contact."`
	LastError    string          `json:"last_error,omitempty" required:"false" doc:"Why the step that made it unreachable could not reach it; empty while it is reachable."`
	CertSerial   string          `json:"cert_serial,omitempty" required:"false" doc:"Serial (hex) of the client certificate the soul holds since it joined; empty when it has none."`
	CertNotAfter *time.Time      `json:"cert_not_after,omitempty" required:"false" doc:"When that certificate expires."`
	JoinedAt     *time.Time      `json:"joined_at,omitempty" required:"false" doc:"When the soul joined (soul join); null if it never did."`
	Executor     string          `json:"executor,omitempty" required:"false" doc:"How the keeper last ran commands on it: agent, ssh: executor (the soul binary over SSH), ssh: shell, or ssh: shell (why the executor cannot run there); empty before the first command."`
}

// SoulCreate is the body of POST /v1/souls: register an existing host.
type SoulCreate struct {
	SID        string         `json:"sid" doc:"The soul's id: a DNS name (the FQDN for cloud-made hosts), each label at most 63 characters."`
	Address    string         `json:"address" doc:"IP address or host name the keeper connects to."`
	Connection Connection     `json:"connection"`
	Attributes map[string]any `json:"attributes,omitempty" required:"false"`
	Project    string         `json:"project,omitempty" required:"false" doc:"The project it goes into: a keeper-wide token's choice (default when absent); a project's token creates in its own project only."`
}

// SoulList is a page of souls.
type SoulList struct {
	Items []Soul `json:"items"`
	Next  string `json:"next"`
}

// Token is an API token as listed: never the token itself.
type Token struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	Role string `json:"role" enum:"admin,operator,viewer,custom" doc:"A built-in role, or custom for a token with an explicit permission list."`
	// Permissions is everything the token may do: its built-in role's
	// permissions, or its explicit list.
	Permissions []string   `json:"permissions" doc:"Every permission the token holds (its role's, or its explicit list)."`
	CreatedBy   string     `json:"created_by"`
	CreatedAt   time.Time  `json:"created_at"`
	ExpiresAt   *time.Time `json:"expires_at,omitempty"`
	RevokedAt   *time.Time `json:"revoked_at,omitempty"`
	Active      bool       `json:"active"`
	Person      *Person    `json:"person,omitempty" required:"false" doc:"Who the keeper minted the token for at an OIDC sign-in; absent for a token minted by hand."`
	Project     string     `json:"project,omitempty" required:"false" doc:"The one project the token acts in; absent for a keeper-wide token."`
}

// TokenCreate is the body of POST /v1/tokens.
type TokenCreate struct {
	Name string `json:"name" doc:"DNS label naming the token's holder."`
	Role string `json:"role,omitempty" required:"false" doc:"admin, operator or viewer; exactly one of role and permissions."`
	// Permissions is an explicit permission list (the token's role is
	// then custom); a token may grant only permissions it holds itself.
	Permissions []string   `json:"permissions,omitempty" required:"false" doc:"An explicit permission list, e.g. [run.create, cloud.create], instead of a role; the caller must hold each one itself."`
	ExpiresAt   *time.Time `json:"expires_at,omitempty" required:"false" doc:"When the token stops working; never when absent."`
	Project     string     `json:"project,omitempty" required:"false" doc:"The one project the token acts in (its objects alone exist for it); absent: keeper-wide, which only a keeper-wide token may create. A project's token creates tokens of its own project."`
}

// TokenCreated answers POST /v1/tokens. Token, the plain secret, appears
// only in this response; the keeper stores its hash.
type TokenCreated struct {
	ID          string     `json:"id"`
	Name        string     `json:"name"`
	Role        string     `json:"role"`
	Permissions []string   `json:"permissions" doc:"Every permission the token holds."`
	CreatedAt   time.Time  `json:"created_at"`
	ExpiresAt   *time.Time `json:"expires_at,omitempty"`
	Token       string     `json:"token" doc:"The API token. Shown once; store it now."`
	Project     string     `json:"project,omitempty" required:"false" doc:"The token's project; absent when keeper-wide."`
}

// RevealsSecret marks the one response whose secret field is meant for the
// caller: the server's masking leaves it whole.
func (TokenCreated) RevealsSecret() {}

// TokenList is a page of tokens.
type TokenList struct {
	Items []Token `json:"items"`
	Next  string  `json:"next"`
}

// AuditEvent is one row of the hash-chained audit log.
type AuditEvent struct {
	Seq      int64           `json:"seq"`
	At       time.Time       `json:"at"`
	ActorAID string          `json:"actor_aid"`
	Action   string          `json:"action"`
	Object   string          `json:"object"`
	Payload  json.RawMessage `json:"payload" doc:"Masked JSON of what changed."`
	PrevHash string          `json:"prev_hash"`
	Hash     string          `json:"hash"`
	// ActorPerson is the person the actor token was minted for at an OIDC
	// sign-in (read from the token; the chain holds it in the token's
	// token.created event).
	ActorPerson *Person `json:"actor_person,omitempty" required:"false" doc:"Who the actor token belongs to, when the keeper minted it for a person at an OIDC sign-in: the person behind the event."`
}

// AuditProblem is a finding of the chain verifier, naming the row (for a
// checkpoint finding, the checkpoint's sequence number).
type AuditProblem struct {
	Seq     int64  `json:"seq"`
	Kind    string `json:"kind" enum:"audit.row_tampered,audit.rows_missing,audit.relinked,audit.head_mismatch,audit.truncated,audit.emptied,audit.unkeyed,audit.checkpoint_mismatch,audit.checkpoint_invalid"`
	Message string `json:"message"`
}

// AuditReport is the outcome of verifying the audit chain. Legacy counts
// the rows at the start of the log that an older keeper wrote with a plain
// SHA-256 instead of an HMAC under the audit key; Checkpoints counts the
// signed checkpoints the log was checked against.
type AuditReport struct {
	OK          bool  `json:"ok"`
	Checked     int64 `json:"checked"`
	HeadSeq     int64 `json:"head_seq"`
	Legacy      int64 `json:"legacy"`
	Checkpoints int   `json:"checkpoints"`
	// Restores counts the restore records (keeper restore) the log was
	// checked against; Superseded the checkpoints whose rows a restore
	// gave up, which are reported, not problems.
	Restores   int            `json:"restores"`
	Superseded int            `json:"superseded"`
	Problems   []AuditProblem `json:"problems"`
}

// AuditList is a page of audit events, with the chain verification when
// asked for (?verify=true).
type AuditList struct {
	Items  []AuditEvent `json:"items"`
	Next   string       `json:"next"`
	Verify *AuditReport `json:"verify,omitempty"`
}

// RunCreate is the body of POST /v1/runs.
type RunCreate struct {
	Scenario string         `json:"scenario" doc:"The scenario, as YAML text."`
	Input    map[string]any `json:"input,omitempty" required:"false" doc:"The scenario's input."`
	Key      string         `json:"key,omitempty" required:"false" maxLength:"200" doc:"Re-run key: the same key with the same scenario and input returns the existing run; with different content, 409 run.key_conflict."`
	Timeout  string         `json:"timeout,omitempty" required:"false" doc:"Server-side timeout as a Go duration (15m default, 24h at most)."`
	// File names the scenario in validation messages (file:line:column).
	File string `json:"file,omitempty" required:"false" doc:"The scenario's file name, used in validation messages."`
	// Mode is apply (the default) or check.
	Mode    RunMode `json:"mode,omitempty" required:"false" enum:"apply,check" doc:"apply (the default) makes souls and clouds right; check says per target what apply would change (would_change, or unknown and why) and changes nothing."`
	Project string  `json:"project,omitempty" required:"false" doc:"The project the run acts in: it reaches that project's souls, providers and profiles (and those shared with it) alone. A keeper-wide token's choice (default when absent); a project's token runs in its own project."`
}

// RunError is why a run or a target failed.
type RunError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// RunTarget is one target's result in one step.
type RunTarget struct {
	SID     string       `json:"sid"`
	Status  TargetStatus `json:"status" enum:"ok,changed,would_change,unknown,failed,skipped,unreachable,running"`
	Changed bool         `json:"changed" doc:"The target changed; in a check run, it would change."`
	// Unknown and Changes are a check run's answer for the target.
	Unknown string          `json:"unknown,omitempty" required:"false" doc:"In a check run, why the keeper cannot tell whether the target would change."`
	Changes []Change        `json:"changes,omitempty" required:"false" doc:"What changed or, in a check run, would change (files as unified diffs)."`
	Output  json.RawMessage `json:"output" doc:"The target's output, masked; in a run's answer cut to fit (output_truncated), whole from GET /v1/runs/{id}/outputs?step=&sid=."`
	// OutputTruncated says the answer cut Output to fit; OutputBytes is
	// then the size of the whole stored output.
	OutputTruncated bool      `json:"output_truncated,omitempty" required:"false" doc:"The answer holds the output cut to fit: its longest strings end with '…[truncated: N bytes dropped]'."`
	OutputBytes     int       `json:"output_bytes,omitempty" required:"false" doc:"The size of the whole stored output, when output_truncated."`
	Error           *RunError `json:"error,omitempty"`
	Attempts        int       `json:"attempts"`
	DurationMS      int64     `json:"duration_ms"`
}

// RunStep is one step of a run.
type RunStep struct {
	Name    string      `json:"name"`
	Module  string      `json:"module"`
	Status  StepStatus  `json:"status" enum:"running,ok,changed,would_change,unknown,failed,skipped" doc:"The step's summary over its targets (SummarizeStep): skipped when every target was skipped."`
	Targets []RunTarget `json:"targets"`
}

// CheckSummary counts a check run's targets: what apply would change.
type CheckSummary struct {
	WouldChange int `json:"would_change" doc:"Targets that would change."`
	Unknown     int `json:"unknown" doc:"Targets whose change cannot be known without running."`
	Unchanged   int `json:"unchanged" doc:"Targets that would not change."`
	Failed      int `json:"failed" doc:"Targets whose check failed or that were unreachable."`
}

// Pending reports whether apply would change something or might.
func (c CheckSummary) Pending() bool { return c.WouldChange > 0 || c.Unknown > 0 }

// Run is one execution of a scenario: the one-shot job.
type Run struct {
	ID         string          `json:"id"`
	Key        string          `json:"key,omitempty"`
	Name       string          `json:"name"`
	Mode       RunMode         `json:"mode" enum:"apply,check" doc:"apply, or check: the run changed nothing and says what apply would change."`
	Phase      Phase           `json:"phase" enum:"Pending,Running,AwaitingApproval,Succeeded,Failed,Cancelled,Rejected"`
	CreatedAt  time.Time       `json:"created_at"`
	CreatedBy  string          `json:"created_by"`
	StartedAt  *time.Time      `json:"started_at"`
	FinishedAt *time.Time      `json:"finished_at"`
	Timeout    string          `json:"timeout"`
	Project    string          `json:"project" doc:"The project the run acts in."`
	Error      *RunError       `json:"error,omitempty"`
	Input      json.RawMessage `json:"input" doc:"The input, masked."`
	Steps      []RunStep       `json:"steps"`
	Outputs    json.RawMessage `json:"outputs" doc:"Each step's output by step name, masked; cut to fit the answer when outputs_truncated (whole from GET /v1/runs/{id}/outputs)."`
	// OutputsTruncated says the answer cut Outputs (and Message, which
	// then ends with the truncation marker) to fit.
	OutputsTruncated bool `json:"outputs_truncated,omitempty" required:"false" doc:"The answer holds outputs (and message) cut to fit; GET /v1/runs/{id}/outputs has them whole."`
	// Check counts a check run's targets by prediction.
	Check *CheckSummary `json:"check,omitempty" required:"false" doc:"A check run's targets by what apply would do."`
	// Approvals are the run's steps an approval policy held.
	Approvals []RunApproval `json:"approvals,omitempty" required:"false" doc:"The steps an approval policy held: pending while the run is AwaitingApproval, then approved, rejected or expired."`
	Message   string        `json:"message" doc:"The job's message: the JSON text of the outputs when the run Succeeded (a check run's summary: how many targets would change, how many are unknown and why); otherwise the error, each failed target as '<step> on <sid>: <code>: <message>' joined with '; ' (at most 5, then a count), or '<code>: <message>' for a run-level error. Outputs stay in outputs."`
}

// RunList is a page of runs, newest first.
type RunList struct {
	Items []Run  `json:"items"`
	Next  string `json:"next"`
}

// RunEvent is one event of a run's stream (GET /v1/runs/{id}/events).
// Kind says which type Data holds (Decode returns it): run.phase
// RunPhaseData, step.started StepStartedData, target.result
// TargetResultData, log LogData, step.finished StepFinishedData,
// step.interrupted StepInterruptedData, command.reattached CommandReattachedData, run.finished RunFinishedData; the
// stream's own stream.end (no data) and stream.denied (a Problem).
type RunEvent struct {
	Seq  int64           `json:"seq" doc:"The event's number in its run, from 1; resume after it with Last-Event-ID."`
	At   time.Time       `json:"at"`
	Kind EventKind       `json:"kind" enum:"run.phase,step.started,target.result,log,step.finished,step.interrupted,command.reattached,run.finished,stream.end,stream.denied" doc:"What the event reports; it names the type of data (RunPhaseData, StepStartedData, TargetResultData, LogData, StepFinishedData, StepInterruptedData, CommandReattachedData, RunFinishedData; a Problem for stream.denied)."`
	Step string          `json:"step,omitempty" required:"false" doc:"The step the event is about."`
	SID  string          `json:"sid,omitempty" required:"false" doc:"The target the event is about (keeper for keeper-side steps)."`
	Data json.RawMessage `json:"data" doc:"The kind's data object."`
}

// Orphan is a VM a driver has, made by a keeper (it carries a request
// tag), that no live soul row owns: what a crash mid-create leaves behind.
type Orphan struct {
	Provider  string `json:"provider"`
	VMID      string `json:"vm_id"`
	FQDN      string `json:"fqdn,omitempty"`
	PrimaryIP string `json:"primary_ip,omitempty"`
	RequestID string `json:"request_id,omitempty"`
	RunID     string `json:"run_id,omitempty"`
	Step      string `json:"step,omitempty"`
}

// OrphanList lists orphaned VMs.
type OrphanList struct {
	Items []Orphan `json:"items"`
	Next  string   `json:"next"`
}

// OrphansDestroy is the body of POST /v1/cloud/orphans/destroy.
type OrphansDestroy struct {
	Provider string   `json:"provider"`
	VMIDs    []string `json:"vm_ids" minItems:"1" doc:"Orphaned VMs to destroy; each must still be an orphan."`
}

// ScenarioValidate is the body of POST /v1/scenarios/validate.
type ScenarioValidate struct {
	Scenario string         `json:"scenario" maxLength:"1048576" doc:"Scenario YAML."`
	File     string         `json:"file,omitempty" required:"false" maxLength:"255" doc:"File name used in the problems' locations (default scenario.yaml)."`
	Input    map[string]any `json:"input,omitempty" required:"false" doc:"The input a run would get; declared defaults apply."`
	// PartialInput says Input is not all a run will get (a CI check of
	// the file alone): a required input it lacks is then not a problem.
	PartialInput bool   `json:"partial_input,omitempty" required:"false" doc:"The input is not all a run will get (checking the file alone, as in CI): required inputs it lacks are not problems; everything else is checked as for a run."`
	Project      string `json:"project,omitempty" required:"false" doc:"The project a run would act in (as for POST /v1/runs): literal targets must be its souls."`
}

// ScenarioValidation is the answer of POST /v1/scenarios/validate.
type ScenarioValidation struct {
	Valid    bool           `json:"valid"`
	Problems []ProblemError `json:"problems" doc:"Every problem, each located as file:line:column with its stable code."`
}
