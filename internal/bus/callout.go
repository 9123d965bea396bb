package bus

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/soulstack/soulstack/internal/agent/wire"
	"github.com/soulstack/soulstack/internal/pki"
)

// Identities is the registry check of a connecting soul: SoulCert returns
// the serial (pki.SerialHex) of the soul's current client certificate,
// and ok false when the soul is unknown, destroyed or has no certificate.
// The keeper implements it over the store.
type Identities interface {
	SoulCert(ctx context.Context, sid string) (serial string, ok bool, err error)
}

// AuthCalloutSubject is the subject the NATS server sends authorization
// requests to (auth callout).
const AuthCalloutSubject = "$SYS.REQ.USER.AUTH"

// Refusal reasons a connecting soul may get; the log and the audit name
// them.
var (
	errNoCert       = errors.New("no client certificate was presented")
	errBadCert      = errors.New("the client certificate is not one of the keeper's CA or has expired")
	errUnknownSoul  = errors.New("the soul is unknown, destroyed or holds no certificate")
	errStaleSerial  = errors.New("the certificate was replaced (serial differs from the registry's)")
	errRegistryDown = errors.New("the registry cannot be read")
	errBusy         = errors.New("the keeper is busy admitting other souls; retry")
	errFlooding     = errors.New("the soul sent more than its agent would and is cut off for a while")
)

// authorize answers one auth callout request: it checks the TLS client
// certificate the server saw and returns the soul's SID, its serial and
// the user JWT (signed with the issuer key) whose permissions allow only
// that soul's subjects, or the reason for a refusal.
func (s *Server) authorize(ctx context.Context, rc *jwt.AuthorizationRequestClaims) (sid, serial, userJWT string, err error) {
	cert, err := leafCert(rc.TLS)
	if err != nil {
		return "", "", "", err
	}
	now := s.now()
	if sid, err = s.cfg.CA.VerifyClient(cert, now); err != nil {
		return "", "", "", fmt.Errorf("%w: %v", errBadCert, err)
	}
	serial = pki.SerialHex(cert)
	if until, paused := s.pausedUntil(sid, now); paused {
		return sid, serial, "", fmt.Errorf("%w (until %s)", errFlooding, until.UTC().Format(time.RFC3339))
	}
	want, ok, err := s.cfg.Identities.SoulCert(ctx, sid)
	switch {
	case err != nil:
		return sid, serial, "", fmt.Errorf("%w: %v", errRegistryDown, err)
	case !ok:
		return sid, serial, "", errUnknownSoul
	case want != serial:
		return sid, serial, "", errStaleSerial
	}
	uc := jwt.NewUserClaims(rc.UserNkey)
	uc.Name = userName(sid, serial)
	uc.Audience = s.account
	uc.Sub.Allow.Add(wire.ExecSubject(sid), wire.CancelSubject(sid))
	// Its heartbeats and the replies to its own commands, nothing else:
	// no inbox, no other soul's subjects.
	uc.Pub.Allow.Add(wire.HeartbeatSubject(sid), wire.ReplyWildcard(sid))
	expires := cert.NotAfter
	if ttl := now.Add(s.cfg.SessionTTL); ttl.Before(expires) {
		expires = ttl
	}
	uc.Expires = expires.Unix()
	userJWT, err = uc.Encode(s.issuer)
	if err != nil {
		return sid, serial, "", fmt.Errorf("sign user JWT: %w", err)
	}
	return sid, serial, userJWT, nil
}

// userName is the NATS user name of a soul's connection: it names the
// certificate, so that a replaced one's connections can be closed alone.
func userName(sid, serial string) string { return "soul:" + sid + ":" + serial }

func leafCert(t *jwt.ClientTLS) (*x509.Certificate, error) {
	if t == nil {
		return nil, errNoCert
	}
	var first string
	switch {
	case len(t.VerifiedChains) > 0 && len(t.VerifiedChains[0]) > 0:
		first = t.VerifiedChains[0][0]
	case len(t.Certs) > 0:
		first = t.Certs[0]
	default:
		return nil, errNoCert
	}
	cert, err := pki.ParseCertificatePEM([]byte(first))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errBadCert, err)
	}
	return cert, nil
}

// callout takes an auth callout request off the keeper's connection:
// NATS delivers a subscription's messages one by one, so it only queues
// the request for a callout worker. When the workers are all busy and the
// queue is full it refuses the connection at once (errBusy) rather than
// let it wait past the server's auth timeout while more pile up.
func (s *Server) callout(m *nats.Msg) {
	select {
	case s.calloutQ <- m:
	default:
		s.busy.Add(1)
		s.refuseBusy(m)
	}
}

// Callout defaults (Config.CalloutWorkers, Config.CalloutQueue).
const (
	defaultCalloutWorkers = 32
	defaultCalloutQueue   = 1024
)

func (s *Server) calloutWorker() {
	defer s.calloutWG.Done()
	for {
		select {
		case m := <-s.calloutQ:
			s.answer(m)
		case <-s.stop:
			return
		}
	}
}

// refuseBusy answers a request with errBusy without looking at the
// registry: one JWT decode and one signature.
func (s *Server) refuseBusy(m *nats.Msg) {
	rc, err := jwt.DecodeAuthorizationRequestClaims(string(m.Data))
	if err != nil {
		s.log.Warn("bus: undecodable authorization request", "err", err)
		return
	}
	s.log.Debug("bus: soul turned away (admission saturated)", "host", rc.ClientInformation.Host)
	s.respond(m, rc, "", errBusy)
}

func (s *Server) answer(m *nats.Msg) {
	rc, err := jwt.DecodeAuthorizationRequestClaims(string(m.Data))
	if err != nil {
		s.log.Warn("bus: undecodable authorization request", "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	sid, serial, userJWT, aerr := s.authorize(ctx, rc)
	if aerr != nil {
		s.log.Warn("bus: soul refused", "sid", sid, "serial", serial, "host", rc.ClientInformation.Host, "reason", aerr)
		s.refused.Add(1)
	} else {
		s.log.Debug("bus: soul authorized", "sid", sid, "serial", serial)
		s.noteSession(sid, serial)
	}
	s.respond(m, rc, userJWT, aerr)
}

// respond sends the callout's answer: the user JWT, or the refusal.
func (s *Server) respond(m *nats.Msg, rc *jwt.AuthorizationRequestClaims, userJWT string, aerr error) {
	cr := jwt.NewAuthorizationResponseClaims(rc.UserNkey)
	cr.Audience = rc.Server.ID
	if aerr != nil {
		cr.Error = aerr.Error()
	} else {
		cr.Jwt = userJWT
	}
	token, err := cr.Encode(s.issuer)
	if err != nil {
		s.log.Error("bus: sign authorization response", "err", err)
		return
	}
	if err := m.Respond([]byte(token)); err != nil {
		s.log.Warn("bus: answer authorization request", "err", err)
	}
}

// newIssuer returns the account key pair that signs callout answers: from
// seed (external cluster: the auth_callout issuer's seed), or a fresh one.
func newIssuer(seed string) (nkeys.KeyPair, error) {
	if seed != "" {
		kp, err := nkeys.FromSeed([]byte(seed))
		if err != nil {
			return nil, fmt.Errorf("issuer seed: %w", err)
		}
		if pub, _ := kp.PublicKey(); !nkeys.IsValidPublicAccountKey(pub) {
			return nil, errors.New("issuer seed: not an account seed (SA...)")
		}
		return kp, nil
	}
	return nkeys.CreateAccount()
}
