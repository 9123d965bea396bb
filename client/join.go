package client

import "time"

// JoinRequest is the body of POST /v1/join: a new soul presents its
// one-time bootstrap token, its SID, a certificate request for its own key
// and its SSH host public keys (authorized_keys lines).
type JoinRequest struct {
	SID      string   `json:"sid,omitempty" doc:"The soul's id, as the bootstrap file names it."`
	Token    string   `json:"token,omitempty" doc:"The one-time bootstrap token (sbt_…)."`
	CSR      string   `json:"csr,omitempty" doc:"PEM certificate request signed by the soul's own key."`
	HostKeys []string `json:"host_keys,omitempty" doc:"The host's SSH host public keys, authorized_keys format; the keeper pins one."`
}

// RenewRequest is the body of POST /v1/join/renew, sent over mutual TLS
// with the soul's current client certificate.
type RenewRequest struct {
	CSR string `json:"csr,omitempty" doc:"PEM certificate request signed by the soul's key."`
}

// AgentBus is where the agent transport's bus is reached.
type AgentBus struct {
	URLs []string `json:"urls" doc:"NATS URLs; empty while the keeper serves no bus."`
}

// JoinResponse is the answer of POST /v1/join and /v1/join/renew.
type JoinResponse struct {
	SID         string    `json:"sid"`
	Certificate string    `json:"certificate" doc:"The soul's client certificate, PEM."`
	CA          string    `json:"ca" doc:"The keeper CA's certificate, PEM."`
	NotAfter    time.Time `json:"not_after" doc:"When the certificate expires; the agent renews it before."`
	NATS        AgentBus  `json:"nats"`
}

// Seed is a scenario a soul carries: run for it when it joins, with the
// seed's input plus sid.
type Seed struct {
	ID       int64          `json:"id"`
	SID      string         `json:"sid"`
	Scenario string         `json:"scenario"`
	Input    map[string]any `json:"input" doc:"The seed's input; the values of sealed_inputs and of secret-looking keys are ***."`
	// SealedInputs names the inputs the scenario declares secret (or
	// feeds to a secret param): sealed at rest, masked in every answer.
	// ("secret" in the name would get the list itself masked.)
	SealedInputs []string  `json:"sealed_inputs" doc:"The inputs the scenario declares secret (secret: true, or fed to a param its module declares secret): sealed at rest and *** in every answer."`
	Status       string    `json:"status" enum:"active,orphaned"`
	Remediate    string    `json:"remediate" enum:"manual,auto" doc:"What a drift check that finds the seed drifted does."`
	DriftEvery   string    `json:"drift_every,omitempty" required:"false" doc:"The seed's own drift schedule, when it has one."`
	CreatedBy    string    `json:"created_by"`
	CreatedAt    time.Time `json:"created_at"`
	// RunID is the run the seed started when it was added to a soul that
	// had joined already.
	RunID string `json:"run_id,omitempty"`
}

// SeedCreate is the body of POST /v1/souls/{sid}/seeds.
type SeedCreate struct {
	Scenario string         `json:"scenario" doc:"Scenario YAML; it sees the seed's input plus input.sid, the soul's SID."`
	Input    map[string]any `json:"input,omitempty" doc:"The scenario's input (sid is set by the keeper)."`
	// Remediate is what a drift check that finds the seed drifted does.
	// DriftEvery is the seed's own drift schedule.
	DriftEvery string `json:"drift_every,omitempty" required:"false" doc:"Check this seed for drift this often (a Go duration, at least 30s), instead of with keeper.yml's drift.every sweep."`
	Remediate  string `json:"remediate,omitempty" required:"false" enum:"manual,auto" doc:"When a drift check finds the soul no longer carries the seed: manual (default) reports it; auto also starts an apply run of the seed as its creator (permissions checked again then), at most once per drift episode."`
}

// SeedList is the answer of GET /v1/souls/{sid}/seeds.
type SeedList struct {
	Items []Seed `json:"items"`
	Next  string `json:"next"`
}
