package store

import (
	"context"
	"encoding/json"
	"time"
)

// Join refusal reasons: the stable codes of JoinRefusedError, audited as
// join.refused and answered as 401 problems.
const (
	JoinTokenUnknown    = "join.token_unknown"
	JoinSIDMismatch     = "join.sid_mismatch"
	JoinTokenUsed       = "join.token_used"
	JoinTokenBurned     = "join.token_burned"
	JoinTokenExpired    = "join.token_expired"
	JoinSoulDestroyed   = "join.soul_destroyed"
	JoinHostKeyMismatch = "join.host_key_mismatch"
	// Renewal refusals: the presented certificate is not the soul's
	// current one (renewed since, or cleared by destroy), or the soul is
	// gone.
	JoinCertRevoked  = "join.cert_revoked"
	JoinSoulNotFound = "join.soul_unknown"
)

// JoinRefusedError is a join or renewal the registry refused; nothing was
// changed. Reason is one of the Join* codes.
type JoinRefusedError struct {
	Reason string
	SID    string
	// Detail is the human message.
	Detail string
}

func (e *JoinRefusedError) Error() string { return e.Reason + ": " + e.Detail }

// SoulJoinParams is a soul's join: the bootstrap token (its hash) it
// presented, the certificate the keeper issued it, and the SSH host key to
// pin.
type SoulJoinParams struct {
	SID       string
	TokenHash string
	// Now decides expiry.
	Now          time.Time
	CertSerial   string
	CertNotAfter time.Time
	// HostKeys are the SSH host public keys the soul reported
	// (authorized_keys lines); HostKey is the one to pin, one of them.
	HostKeys []string
	HostKey  string
	// Audit is extra payload of soul.joined (never the token).
	Audit map[string]any
}

// SoulRenewParams replaces a soul's client certificate: OldSerial must be
// the one the registry holds.
type SoulRenewParams struct {
	SID          string
	OldSerial    string
	CertSerial   string
	CertNotAfter time.Time
}

// Soul seed statuses.
const (
	SeedActive   = "active"
	SeedOrphaned = "orphaned"
)

// SoulSeed is a scenario a soul carries: run for it when it joins.
type SoulSeed struct {
	ID       int64
	SID      string
	Scenario string
	Input    json.RawMessage
	// Secret names the inputs whose values are secret by the scenario's
	// declaration (secret: true, or fed to a secret param): the store
	// seals them at rest like those under secret-looking keys, and every
	// answer masks them.
	Secret    []string
	Status    string
	CreatedBy string
	CreatedAt time.Time
	// Remediate is what a drift check that finds the seed drifted does:
	// SeedRemediateManual (report) or SeedRemediateAuto (apply the seed
	// again, once per drift episode). Empty reads as manual.
	Remediate string
	// DriftEvery is the seed's own drift schedule; 0 leaves it to the
	// keeper-wide drift.every sweep.
	DriftEvery time.Duration
}

// The remediations of a drifted seed.
const (
	SeedRemediateManual = "manual"
	SeedRemediateAuto   = "auto"
)

// SeedAddParams adds a seed to a soul (audit seed.added).
type SeedAddParams struct {
	Seed  SoulSeed
	Actor Actor
}

// JoinStore is the registry side of souls joining by themselves.
type JoinStore interface {
	// SoulJoin consumes a bootstrap token in one transaction: the token
	// must be issued, unexpired at p.Now and bound to p.SID, and the soul
	// not destroyed; the token becomes used, the soul active with its
	// certificate serial, not_after, joined_at and the pinned host key,
	// and soul.joined is written. A refusal is *JoinRefusedError and
	// changes nothing.
	SoulJoin(ctx context.Context, p SoulJoinParams) (Soul, error)
	// JoinCheck answers what SoulJoin would refuse p for (token, SID,
	// soul, pinned host key) without changing anything or writing audit:
	// the keeper asks it before it signs a certificate, so that a request
	// with no valid token costs one lookup.
	JoinCheck(ctx context.Context, p SoulJoinParams) error
	// SoulRenewCert replaces the soul's certificate serial when OldSerial
	// is the current one (audit soul.cert_renewed); otherwise
	// *JoinRefusedError (join.cert_revoked, join.soul_destroyed,
	// join.soul_unknown) and nothing changes.
	SoulRenewCert(ctx context.Context, p SoulRenewParams) (Soul, error)
	// RenewCheck answers what SoulRenewCert would refuse p for (its
	// OldSerial and SID) without changing anything: asked before a
	// certificate is signed.
	RenewCheck(ctx context.Context, p SoulRenewParams) error
	// SeedAdd stores a seed, status active (audit seed.added); an unknown
	// soul is ErrNotFound.
	SeedAdd(ctx context.Context, p SeedAddParams) (SoulSeed, error)
	// Seeds lists a soul's seeds by id (any status).
	Seeds(ctx context.Context, sid string) ([]SoulSeed, error)
}
