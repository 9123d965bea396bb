package api

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/danielgtaylor/huma/v2"
	gossh "golang.org/x/crypto/ssh"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/pki"
	"github.com/soulstack/soulstack/internal/store"
)

// JoinConfig enables the routes souls use to get and renew their
// identity: POST /v1/join (a bootstrap token, no API token) and POST
// /v1/join/renew (the current client certificate over mutual TLS).
type JoinConfig struct {
	// CA is the keeper's own CA; it signs the souls' client certificates.
	CA *pki.CA
	// CertTTL is the lifetime of a client certificate (0:
	// pki.ClientValidity).
	CertTTL time.Duration
	// AgentURLs returns the agent bus's URLs for soul sid's answer
	// (nats.urls): where that soul reaches the bus; nil, or an empty list,
	// while the keeper serves no bus.
	AgentURLs func(ctx context.Context, sid string) []string
	// AgentBinary is the soul binary served at GET /v1/agent/soul (empty:
	// the route answers 404 agent.binary_missing).
	AgentBinary string
	// Guard bounds and audits refused joins (NewJoinGuard); one is shared
	// by the listeners of a keeper. Nil: a guard of its own with
	// NewJoinGuard's defaults.
	Guard *JoinGuard
}

// AgentBinaryPath is the download route of the soul binary.
const AgentBinaryPath = "/v1/agent/soul"

// maxHostKeys bounds the host keys a join may report; maxCSR the size of
// its certificate request.
const (
	maxHostKeys = 16
	maxCSR      = 16 << 10
)

type joinState struct {
	cfg   JoinConfig
	guard *JoinGuard

	binMu  sync.Mutex
	binSum string // sha256 of AgentBinary, computed once
}

type connKey struct{}

// connInfo is what the join routes know of the connection.
type connInfo struct {
	host string
	tls  *tls.ConnectionState
}

func withConn(ctx huma.Context, next func(huma.Context)) {
	next(huma.WithValue(ctx, connKey{}, connInfo{host: hostOf(ctx.RemoteAddr()), tls: ctx.TLS()}))
}

func connOf(ctx context.Context) connInfo {
	c, _ := ctx.Value(connKey{}).(connInfo)
	return c
}

// joinRefused is a refusal of the join routes: status, stable code,
// message; audited as join.refused and counted against the client.
type joinRefused struct {
	status int
	code   string
	msg    string
	loc    string
	// retryAfter is sent as Retry-After with a 429.
	retryAfter time.Duration
}

func (e *joinRefused) Error() string { return e.code + ": " + e.msg }

type joinOutput struct {
	Body client.JoinResponse
}

func (s *Server) registerJoin() {
	if s.join == nil {
		return
	}
	tags := []string{"join"}
	register(s, huma.Operation{
		OperationID: "join", Method: http.MethodPost, Path: "/v1/join", Tags: tags,
		Summary: "Exchange a one-time bootstrap token for the soul's client certificate",
		Description: "No API token: the body's bootstrap token authenticates. The token must be issued, unexpired and bound to sid; " +
			"it becomes used in the transaction that makes the soul active, stores the certificate's serial and pins one of host_keys " +
			"(soul.joined). Refusals are 401 with a distinct code (join.token_unknown, join.sid_mismatch, join.token_used, " +
			"join.token_burned, join.token_expired, join.soul_destroyed, join.host_key_mismatch), 400 join.invalid for malformed input, " +
			"each audited as join.refused and changing nothing; a client address with too many refusals gets 429 join.rate_limited.",
		DefaultStatus: http.StatusCreated,
		Middlewares:   huma.Middlewares{withConn},
		Errors:        []int{http.StatusBadRequest, http.StatusUnauthorized, http.StatusTooManyRequests},
	}, "", true, func(ctx context.Context, in *struct{ Body client.JoinRequest }) (*joinOutput, error) {
		return s.joinCall(ctx, in.Body.SID, func() (*joinOutput, error) { return s.doJoin(ctx, in.Body) })
	})
	register(s, huma.Operation{
		OperationID: "join-renew", Method: http.MethodPost, Path: "/v1/join/renew", Tags: tags,
		Summary: "Renew the soul's client certificate",
		Description: "Authenticated by the soul's current client certificate over mutual TLS (the agent listener). The certificate must " +
			"verify against the keeper CA and be the one the registry holds for a soul that is not destroyed; the new certificate's " +
			"serial replaces it (soul.cert_renewed), so the old one no longer renews. Refusals: 401 join.cert_missing, " +
			"join.cert_invalid, join.cert_revoked, join.soul_destroyed, join.soul_unknown (audited as join.refused).",
		Middlewares: huma.Middlewares{withConn},
		Errors:      []int{http.StatusBadRequest, http.StatusUnauthorized, http.StatusTooManyRequests},
	}, "", true, func(ctx context.Context, in *struct{ Body client.RenewRequest }) (*joinOutput, error) {
		return s.joinCall(ctx, "", func() (*joinOutput, error) { return s.doRenew(ctx, in.Body) })
	})
	s.mux.HandleFunc("GET "+AgentBinaryPath, s.serveAgentBinary)
}

// joinCall applies the join guard around a join route: a client over its
// budget is refused before anything is looked up; a refusal spends one
// attempt of the client and of the keeper and is audited (JoinGuard); once
// the keeper's budget is spent, every refusal is a 429.
func (s *Server) joinCall(ctx context.Context, sid string, call func() (*joinOutput, error)) (*joinOutput, error) {
	host := connOf(ctx).host
	g := s.join.guard
	client, first, keeper := g.limited(host)
	if client {
		if first {
			g.audit(ctx, host, sid, "join.rate_limited")
		}
		return nil, &joinRefused{status: http.StatusTooManyRequests, code: "join.rate_limited",
			msg:        fmt.Sprintf("too many refused joins from %s; try again in %ss", host, retryAfterSeconds(g.perClient.interval)),
			retryAfter: g.perClient.interval}
	}
	out, err := call()
	if err == nil {
		return out, nil
	}
	var jr *joinRefused
	var sr *store.JoinRefusedError
	code := ""
	switch {
	case errors.As(err, &sr):
		code = sr.Reason
		if sid == "" {
			sid = sr.SID
		}
	case errors.As(err, &jr):
		code = jr.code
	default:
		return nil, err
	}
	g.refused(ctx, host, sid, code)
	if keeper {
		return nil, &joinRefused{status: http.StatusTooManyRequests, code: "join.rate_limited",
			msg:        "the keeper has refused too many joins; try again in 1s",
			retryAfter: time.Second}
	}
	return nil, err // problemFor maps it
}

func badJoin(loc, format string, args ...any) error {
	return &joinRefused{status: http.StatusBadRequest, code: "join.invalid", loc: loc, msg: fmt.Sprintf(format, args...)}
}

// parseCSR decodes a PEM certificate request and checks its signature.
func parseCSR(loc, text string) (*x509.CertificateRequest, error) {
	block, _ := pem.Decode([]byte(text))
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, badJoin(loc, "is not a PEM CERTIFICATE REQUEST")
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, badJoin(loc, "cannot be parsed: %v", err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, badJoin(loc, "its signature does not verify: %v", err)
	}
	return csr, nil
}

// hostKeyPreference orders the key types a joined soul's pin is chosen
// from: the one the SSH transport offers first.
var hostKeyPreference = []string{gossh.KeyAlgoED25519, gossh.KeyAlgoECDSA256, gossh.KeyAlgoECDSA384, gossh.KeyAlgoECDSA521, gossh.KeyAlgoRSA}

func (s *Server) doJoin(ctx context.Context, b client.JoinRequest) (*joinOutput, error) {
	if p := checkSID("body.sid", b.SID); p != nil {
		return nil, badJoin("body.sid", "%s", p.Detail)
	}
	if !strings.HasPrefix(b.Token, "sbt_") || len(b.Token) > 128 {
		return nil, badJoin("body.token", "is not a bootstrap token (sbt_…)")
	}
	if len(b.CSR) > maxCSR {
		return nil, badJoin("body.csr", "is %d bytes; a certificate request is at most %d", len(b.CSR), maxCSR)
	}
	if len(b.HostKeys) > maxHostKeys {
		return nil, badJoin("body.host_keys", "holds %d keys; at most %d are accepted", len(b.HostKeys), maxHostKeys)
	}
	var keys, fingerprints []string
	pin, rank := "", len(hostKeyPreference)
	for i, line := range b.HostKeys {
		pk, _, _, _, err := gossh.ParseAuthorizedKey([]byte(line))
		if err != nil {
			return nil, badJoin(fmt.Sprintf("body.host_keys[%d]", i), "is not an SSH public key in authorized_keys format: %v", err)
		}
		key := strings.TrimSpace(string(gossh.MarshalAuthorizedKey(pk)))
		keys = append(keys, key)
		fingerprints = append(fingerprints, gossh.FingerprintSHA256(pk))
		r := len(hostKeyPreference) - 1
		for j, t := range hostKeyPreference {
			if pk.Type() == t {
				r = j
			}
		}
		if pin == "" || r < rank {
			pin, rank = key, r
		}
	}
	now := s.now()
	sum := sha256.Sum256([]byte(b.Token))
	p := store.SoulJoinParams{SID: b.SID, TokenHash: hex.EncodeToString(sum[:]), Now: now, HostKeys: keys, HostKey: pin,
		Audit: map[string]any{"host_key_fingerprints": nonNilList(fingerprints), "client": connOf(ctx).host}}
	// Cheap checks before expensive ones: the token is looked up before
	// the request's signature is checked and a certificate signed.
	if err := s.soulStore.JoinCheck(ctx, p); err != nil {
		return nil, err
	}
	csr, err := parseCSR("body.csr", b.CSR)
	if err != nil {
		return nil, err
	}
	cert, err := s.join.cfg.CA.IssueClient(csr, b.SID, s.join.cfg.CertTTL, now)
	if err != nil {
		return nil, badJoin("body.csr", "%v", err)
	}
	p.CertSerial, p.CertNotAfter = cert.Serial, cert.Cert.NotAfter
	so, err := s.soulStore.SoulJoin(ctx, p)
	if err != nil {
		return nil, err
	}
	if s.seeds != nil {
		s.seeds.Joined(ctx, so.SID)
	}
	return &joinOutput{Body: s.joinAnswer(ctx, b.SID, cert)}, nil
}

func nonNilList(l []string) []string {
	if l == nil {
		return []string{}
	}
	return l
}

func (s *Server) joinAnswer(ctx context.Context, sid string, cert pki.ClientCert) client.JoinResponse {
	urls := []string{}
	if s.join.cfg.AgentURLs != nil {
		if u := s.join.cfg.AgentURLs(ctx, sid); u != nil {
			urls = u
		}
	}
	return client.JoinResponse{SID: sid, Certificate: string(cert.PEM), CA: string(s.join.cfg.CA.PEM), NotAfter: cert.Cert.NotAfter.UTC(), NATS: client.AgentBus{URLs: urls}}
}

func (s *Server) doRenew(ctx context.Context, b client.RenewRequest) (*joinOutput, error) {
	cs := connOf(ctx).tls
	if cs == nil || len(cs.PeerCertificates) == 0 {
		return nil, &joinRefused{status: http.StatusUnauthorized, code: "join.cert_missing", msg: "renewal needs the soul's current client certificate over mutual TLS (the agent listener)"}
	}
	now := s.now()
	peer := cs.PeerCertificates[0]
	sid, err := s.join.cfg.CA.VerifyClient(peer, now)
	if err != nil {
		return nil, &joinRefused{status: http.StatusUnauthorized, code: "join.cert_invalid", msg: "the client certificate does not verify against the keeper CA: " + err.Error()}
	}
	// The registry first, the signature and the signing after.
	rp := store.SoulRenewParams{SID: sid, OldSerial: pki.SerialHex(peer)}
	if err := s.soulStore.RenewCheck(ctx, rp); err != nil {
		return nil, err
	}
	if len(b.CSR) > maxCSR {
		return nil, badJoin("body.csr", "is %d bytes; a certificate request is at most %d", len(b.CSR), maxCSR)
	}
	csr, err := parseCSR("body.csr", b.CSR)
	if err != nil {
		return nil, err
	}
	cert, err := s.join.cfg.CA.IssueClient(csr, sid, s.join.cfg.CertTTL, now)
	if err != nil {
		return nil, badJoin("body.csr", "%v", err)
	}
	rp.CertSerial, rp.CertNotAfter = cert.Serial, cert.Cert.NotAfter
	if _, err := s.soulStore.SoulRenewCert(ctx, rp); err != nil {
		return nil, err
	}
	return &joinOutput{Body: s.joinAnswer(ctx, sid, cert)}, nil
}

// serveAgentBinary serves the soul binary with its SHA-256 in
// X-Checksum-Sha256 (userdata checks the same sum).
func (s *Server) serveAgentBinary(w http.ResponseWriter, r *http.Request) {
	path := s.join.cfg.AgentBinary
	f, err := os.Open(path)
	if path == "" || err != nil {
		s.writeProblem(w, problem(http.StatusNotFound, "agent.binary_missing", "this keeper has no soul binary to serve (agent_binary in keeper.yml)"))
		return
	}
	defer f.Close()
	sum, err := s.AgentBinarySum()
	if err != nil {
		s.writeProblem(w, problem(http.StatusInternalServerError, "internal.error", "the keeper failed to read its soul binary; see its log"))
		s.log.Error("read agent binary", "path", path, "err", err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("X-Checksum-Sha256", sum)
	if _, err := io.Copy(w, f); err != nil {
		s.log.Debug("send agent binary", "err", err)
	}
}

// AgentBinarySum returns the SHA-256 (hex) of the served soul binary,
// computed once.
func (s *Server) AgentBinarySum() (string, error) {
	if s.join == nil || s.join.cfg.AgentBinary == "" {
		return "", errors.New("no agent binary")
	}
	s.join.binMu.Lock()
	defer s.join.binMu.Unlock()
	if s.join.binSum != "" {
		return s.join.binSum, nil
	}
	sum, err := FileSHA256(s.join.cfg.AgentBinary)
	if err != nil {
		return "", err
	}
	s.join.binSum = sum
	return sum, nil
}

// FileSHA256 returns the hex SHA-256 of a file.
func FileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
