// Package soulid is the soul agent's identity, client side: it joins the
// keeper with the one-time bootstrap token (Join), keeps the key, the
// client certificate, the keeper CA and the agent state in the state dir,
// renews the certificate before it expires (Identity.Renew, RenewLoop),
// and gives the agent transport a *tls.Config that always presents the
// current certificate (Identity.TLSConfig). It imports no server or
// database package: it is linked into the soul binary.
//
// Files of the state dir (default /var/lib/soulstack):
//
//	soul.key    0600  ECDSA P-256 private key (PEM); made here, never sent
//	soul.crt    0644  the current client certificate (PEM)
//	ca.crt      0644  the keeper CA (PEM), checked against the fingerprint
//	agent.json  0600  {"sid", "keeper_url", "ca_fingerprint", "nats_urls", "cert_not_after"}
//
// Every file is replaced atomically (a temporary file renamed into place).
package soulid

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/atomicfile"
	"github.com/soulstack/soulstack/internal/pki"
)

// Default paths.
const (
	DefaultStateDir   = "/var/lib/soulstack"
	DefaultBootstrap  = "/etc/soulstack/bootstrap.json"
	DefaultHostKeyDir = "/etc/ssh"
)

// File names in the state dir.
const (
	KeyFile   = "soul.key"
	CertFile  = "soul.crt"
	CAFile    = "ca.crt"
	StateFile = "agent.json"
)

// Routes of the keeper's agent listener.
const (
	JoinPath  = "/v1/join"
	RenewPath = "/v1/join/renew"
)

// Bootstrap is the file cloud-init leaves for the agent.
type Bootstrap struct {
	Keeper        string `json:"keeper"`
	CAFingerprint string `json:"ca_fingerprint"`
	SID           string `json:"sid"`
	Token         string `json:"token"`
}

// ReadBootstrap reads a bootstrap file; a missing file is an empty
// Bootstrap (flags may give everything).
func ReadBootstrap(path string) (Bootstrap, error) {
	var b Bootstrap
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return b, nil
	}
	if err != nil {
		return b, fmt.Errorf("read bootstrap file: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		return b, fmt.Errorf("bootstrap file %s: %w", path, err)
	}
	return b, nil
}

// State is agent.json.
type State struct {
	SID           string    `json:"sid"`
	KeeperURL     string    `json:"keeper_url"`
	CAFingerprint string    `json:"ca_fingerprint"`
	NATSURLs      []string  `json:"nats_urls"`
	CertNotAfter  time.Time `json:"cert_not_after"`
}

// Error is a join or renewal failure with a stable code.
type Error struct {
	Code    string
	Message string
	Err     error
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }
func (e *Error) Unwrap() error { return e.Err }

// JoinOptions are what `soul join` needs.
type JoinOptions struct {
	Bootstrap
	// StateDir receives the identity; HostKeyDir holds ssh_host_*_key.pub.
	StateDir   string
	HostKeyDir string
	// BootstrapPath, when set, is removed after a successful join: the
	// token is spent.
	BootstrapPath string
	// Timeout bounds one join call (default 30s).
	Timeout time.Duration
	// RetryFor keeps trying, every RetryEvery (default 2s), while the
	// keeper cannot be reached, does not know the token yet (a VM may
	// boot before the keeper has recorded it) or rate-limits; other
	// refusals are final. Zero: one attempt.
	RetryFor   time.Duration
	RetryEvery time.Duration
}

// retryable reports whether a join failure may pass by itself.
func retryable(err error) bool {
	var e *Error
	if !errors.As(err, &e) {
		return false
	}
	switch e.Code {
	case "join.unreachable", "join.token_unknown", "join.rate_limited":
		return true
	}
	return false
}

// Join generates the soul's key, asks the keeper for a certificate with
// the bootstrap token, verifying the keeper against the CA fingerprint,
// and writes the state dir.
func Join(ctx context.Context, o JoinOptions) (*Identity, error) {
	switch {
	case o.Keeper == "":
		return nil, &Error{Code: "join.keeper_missing", Message: "no keeper URL (bootstrap file key keeper, or --keeper)"}
	case o.SID == "":
		return nil, &Error{Code: "join.sid_missing", Message: "no SID (bootstrap file key sid, or --sid)"}
	case o.Token == "":
		return nil, &Error{Code: "join.token_missing", Message: "no bootstrap token (bootstrap file key token, or --token)"}
	case o.CAFingerprint == "":
		return nil, &Error{Code: "join.ca_fingerprint_missing", Message: "no CA fingerprint (bootstrap file key ca_fingerprint, or --ca-fingerprint)"}
	}
	fp, err := client.ParseFingerprint(o.CAFingerprint)
	if err != nil {
		return nil, &Error{Code: "join.ca_fingerprint_invalid", Message: err.Error()}
	}
	u, err := url.Parse(o.Keeper)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, &Error{Code: "join.keeper_invalid", Message: fmt.Sprintf("keeper URL %q: want https://host:port", o.Keeper)}
	}
	if o.StateDir == "" {
		o.StateDir = DefaultStateDir
	}
	if o.HostKeyDir == "" {
		o.HostKeyDir = DefaultHostKeyDir
	}
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
	}
	if o.RetryEvery <= 0 {
		o.RetryEvery = 2 * time.Second
	}
	hostKeys, err := HostKeys(o.HostKeyDir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("create state dir: %w", err)
	}
	key, err := loadOrCreateKey(filepath.Join(o.StateDir, KeyFile))
	if err != nil {
		return nil, err
	}
	csr, err := newCSR(key, o.SID)
	if err != nil {
		return nil, err
	}
	hc := &http.Client{Timeout: o.Timeout, Transport: &http.Transport{TLSClientConfig: pinnedTLS(fp, nil), Proxy: nil}}
	var resp client.JoinResponse
	req := client.JoinRequest{SID: o.SID, Token: o.Token, CSR: string(csr), HostKeys: hostKeys}
	deadline := time.Now().Add(o.RetryFor)
	for {
		err = post(ctx, hc, strings.TrimSuffix(o.Keeper, "/")+JoinPath, req, &resp)
		if err == nil || !retryable(err) || time.Now().Add(o.RetryEvery).After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(o.RetryEvery):
		}
	}
	if err != nil {
		return nil, err
	}
	ca, err := checkCA(resp.CA, fp)
	if err != nil {
		return nil, err
	}
	id := &Identity{dir: o.StateDir, key: key, ca: ca, caPEM: []byte(resp.CA),
		state: State{SID: o.SID, KeeperURL: strings.TrimSuffix(o.Keeper, "/"), CAFingerprint: client.Fingerprint(ca)}}
	if err := id.store(resp); err != nil {
		return nil, err
	}
	if o.BootstrapPath != "" {
		if err := os.Remove(o.BootstrapPath); err != nil && !errors.Is(err, os.ErrNotExist) {
			return id, fmt.Errorf("joined, but the spent bootstrap file %s could not be removed: %w", o.BootstrapPath, err)
		}
	}
	return id, nil
}

// HostKeys reads the SSH host public keys of dir (ssh_host_*_key.pub),
// in name order. A directory without any is no error: a host without
// sshd joins all the same.
func HostKeys(dir string) ([]string, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "ssh_host_*_key.pub"))
	if err != nil {
		return nil, err
	}
	slices.Sort(paths)
	var out []string
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("read host key: %w", err)
		}
		if line := strings.TrimSpace(string(b)); line != "" {
			out = append(out, line)
		}
	}
	return out, nil
}

// pinnedTLS trusts exactly the CA whose certificate has fingerprint fp
// (found in the server's chain) or, when ca is given, that CA: the
// server's leaf must chain to it. Host names are not checked: the CA is
// the keeper's own and pinned, so every certificate it signed is the
// keeper's.
func pinnedTLS(fp []byte, ca *x509.Certificate) *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: true, //nolint:gosec // verified in VerifyConnection against the pinned CA
		VerifyConnection: func(cs tls.ConnectionState) error {
			return verifyPinned(cs.PeerCertificates, fp, ca)
		},
	}
}

func verifyPinned(chain []*x509.Certificate, fp []byte, ca *x509.Certificate) error {
	if len(chain) == 0 {
		return errors.New("the keeper presented no certificate")
	}
	root := ca
	if root == nil {
		for _, c := range chain {
			sum := sha256.Sum256(c.Raw)
			if subtle.ConstantTimeCompare(sum[:], fp) == 1 {
				root = c
				break
			}
		}
	}
	if root == nil {
		return errors.New("the keeper's certificate chain holds no CA with the pinned fingerprint: this is not the keeper the bootstrap file names")
	}
	roots := x509.NewCertPool()
	roots.AddCert(root)
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	if _, err := chain[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return fmt.Errorf("the keeper's certificate does not verify against the pinned CA: %w", err)
	}
	return nil
}

func checkCA(caPEM string, fp []byte) (*x509.Certificate, error) {
	ca, err := pki.ParseCertificatePEM([]byte(caPEM))
	if err != nil {
		return nil, &Error{Code: "join.bad_answer", Message: "the keeper's CA certificate: " + err.Error()}
	}
	sum := sha256.Sum256(ca.Raw)
	if subtle.ConstantTimeCompare(sum[:], fp) != 1 {
		return nil, &Error{Code: "join.bad_answer", Message: "the keeper answered with a CA certificate that is not the pinned one"}
	}
	return ca, nil
}

// post sends body as JSON and decodes a 2xx answer into out; a problem
// answer becomes an *Error with the problem's code.
func post(ctx context.Context, hc *http.Client, u string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return &Error{Code: "join.unreachable", Message: err.Error(), Err: err}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return &Error{Code: "join.unreachable", Message: err.Error(), Err: err}
	}
	if resp.StatusCode/100 != 2 {
		var p client.Problem
		if json.Unmarshal(raw, &p) == nil && p.Code != "" {
			return &Error{Code: p.Code, Message: fmt.Sprintf("the keeper refused (%d): %s", resp.StatusCode, p.Detail)}
		}
		return &Error{Code: "join.refused", Message: fmt.Sprintf("the keeper answered %s: %s", resp.Status, strings.TrimSpace(string(raw)))}
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return &Error{Code: "join.bad_answer", Message: "decode the keeper's answer: " + err.Error()}
	}
	return nil
}

func loadOrCreateKey(path string) (*ecdsa.PrivateKey, error) {
	if b, err := os.ReadFile(path); err == nil {
		return parseKey(b)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read soul key: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	if err := atomicfile.Write(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return nil, err
	}
	return key, nil
}

func parseKey(b []byte) (*ecdsa.PrivateKey, error) {
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "EC PRIVATE KEY" {
		return nil, errors.New("soul key: no EC PRIVATE KEY PEM block")
	}
	return x509.ParseECPrivateKey(block.Bytes)
}

func newCSR(key *ecdsa.PrivateKey, sid string) ([]byte, error) {
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: sid}}, key)
	if err != nil {
		return nil, fmt.Errorf("certificate request: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}

// Identity is a joined soul's identity, loaded from its state dir. It is
// safe for concurrent use: renewal swaps the certificate under a lock.
type Identity struct {
	dir   string
	key   *ecdsa.PrivateKey
	ca    *x509.Certificate
	caPEM []byte

	mu    sync.Mutex
	cert  tls.Certificate
	state State
}

// Load reads the identity of a state dir that Join wrote.
func Load(dir string) (*Identity, error) {
	read := func(name string) ([]byte, error) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("%w (has this soul joined? run soul join)", err)
		}
		return b, nil
	}
	keyPEM, err := read(KeyFile)
	if err != nil {
		return nil, err
	}
	key, err := parseKey(keyPEM)
	if err != nil {
		return nil, err
	}
	certPEM, err := read(CertFile)
	if err != nil {
		return nil, err
	}
	caPEM, err := read(CAFile)
	if err != nil {
		return nil, err
	}
	ca, err := pki.ParseCertificatePEM(caPEM)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", CAFile, err)
	}
	raw, err := read(StateFile)
	if err != nil {
		return nil, err
	}
	var st State
	if err := json.Unmarshal(raw, &st); err != nil {
		return nil, fmt.Errorf("%s: %w", StateFile, err)
	}
	if st.CAFingerprint != client.Fingerprint(ca) {
		return nil, fmt.Errorf("%s is not the CA %s names (%s)", CAFile, StateFile, st.CAFingerprint)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", CertFile, err)
	}
	return &Identity{dir: dir, key: key, ca: ca, caPEM: caPEM, cert: cert, state: st}, nil
}

// store writes a join or renewal answer: soul.crt, ca.crt, agent.json.
func (id *Identity) store(resp client.JoinResponse) error {
	keyDER, err := x509.MarshalECPrivateKey(id.key)
	if err != nil {
		return err
	}
	cert, err := tls.X509KeyPair([]byte(resp.Certificate), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	if err != nil {
		return &Error{Code: "join.bad_answer", Message: "the keeper's certificate does not match the soul's key: " + err.Error()}
	}
	if sid, err := pki.SoulSID(cert.Leaf); err != nil || sid != id.state.SID {
		return &Error{Code: "join.bad_answer", Message: fmt.Sprintf("the keeper's certificate does not name soul %q", id.state.SID)}
	}
	id.mu.Lock()
	st := id.state
	st.NATSURLs = resp.NATS.URLs
	if st.NATSURLs == nil {
		st.NATSURLs = []string{}
	}
	st.CertNotAfter = cert.Leaf.NotAfter.UTC()
	id.mu.Unlock()
	if err := atomicfile.Write(filepath.Join(id.dir, CAFile), id.caPEM, 0o644); err != nil {
		return err
	}
	if err := atomicfile.Write(filepath.Join(id.dir, CertFile), []byte(resp.Certificate), 0o644); err != nil {
		return err
	}
	b, _ := json.MarshalIndent(st, "", "  ")
	if err := atomicfile.Write(filepath.Join(id.dir, StateFile), append(b, '\n'), 0o600); err != nil {
		return err
	}
	id.mu.Lock()
	id.cert, id.state = cert, st
	id.mu.Unlock()
	return nil
}

// State returns agent.json as loaded or last written.
// Dir is the state directory the identity is kept in.
func (id *Identity) Dir() string { return id.dir }

func (id *Identity) State() State {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.state
}

// Certificate returns the current client certificate.
func (id *Identity) Certificate() *x509.Certificate {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.cert.Leaf
}

// TLSConfig returns the client TLS configuration of the agent's
// connections to the keeper (the agent listener, the bus): the current
// client certificate, read at each handshake so that a renewal takes
// effect on the next connection, and the keeper CA as the only root
// (host names are not checked, see pinnedTLS).
func (id *Identity) TLSConfig() *tls.Config {
	cfg := pinnedTLS(nil, id.ca)
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		id.mu.Lock()
		defer id.mu.Unlock()
		c := id.cert
		return &c, nil
	}
	pool := x509.NewCertPool()
	pool.AddCert(id.ca)
	cfg.RootCAs = pool
	return cfg
}

// Renew asks the keeper for a new certificate over mutual TLS with the
// current one, and stores it. The keeper refuses (join.cert_revoked,
// join.soul_destroyed) a certificate that is no longer the soul's.
func (id *Identity) Renew(ctx context.Context) error {
	csr, err := newCSR(id.key, id.state.SID)
	if err != nil {
		return err
	}
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: id.TLSConfig(), Proxy: nil}}
	defer hc.CloseIdleConnections()
	var resp client.JoinResponse
	if err := post(ctx, hc, id.State().KeeperURL+RenewPath, client.RenewRequest{CSR: string(csr)}, &resp); err != nil {
		return err
	}
	if _, err := checkCA(resp.CA, mustFingerprint(id.ca)); err != nil {
		return err
	}
	return id.store(resp)
}

func mustFingerprint(c *x509.Certificate) []byte {
	sum := sha256.Sum256(c.Raw)
	return sum[:]
}

// RenewAt is when a certificate that expires at notAfter is renewed, seen
// at now (when it was obtained or loaded): after two thirds of the time it
// has left, and never sooner than MinRenewWait from now. (Its NotBefore is
// backdated for clock skew, so it does not tell when it was issued.)
func RenewAt(now, notAfter time.Time) time.Time {
	wait := notAfter.Sub(now) * 2 / 3
	if wait < MinRenewWait {
		wait = MinRenewWait
	}
	return now.Add(wait)
}

// MinRenewWait is the shortest pause between two renewals.
const MinRenewWait = time.Second

// RenewLoop renews the certificate at RenewAt (two thirds of the time the
// current one has left), retrying a failed renewal
// every retry (at most until the certificate expires, then it goes on at
// the same pace), until ctx ends. A refusal that will not change
// (join.cert_revoked, join.soul_destroyed, join.soul_unknown) ends the
// loop with its error: the soul's identity is gone.
func (id *Identity) RenewLoop(ctx context.Context, log *slog.Logger, retry time.Duration) error {
	if retry <= 0 {
		retry = time.Minute
	}
	for {
		c := id.Certificate()
		wait := time.Until(RenewAt(time.Now(), c.NotAfter))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(max(0, wait)):
		}
		for {
			err := id.Renew(ctx)
			if err == nil {
				log.Info("client certificate renewed", "sid", id.state.SID, "not_after", id.Certificate().NotAfter)
				break
			}
			var e *Error
			if errors.As(err, &e) && (e.Code == "join.cert_revoked" || e.Code == "join.soul_destroyed" || e.Code == "join.soul_unknown") {
				return err
			}
			log.Warn("renew client certificate", "err", err, "retry_in", retry)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(retry):
			}
		}
	}
}
