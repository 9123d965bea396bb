// Package pki is the keeper's own certificate authority: it loads or
// creates a CA in a directory of the data dir (ECDSA P-256, private keys
// mode 0600), issues the keeper's HTTPS server certificate for the names
// and addresses it is reached by, renews that certificate when it nears
// expiry or no longer covers them, issues souls their short-lived client
// certificates (IssueClient, VerifyClient), and names the CA by its
// fingerprint.
//
// The fingerprint is the SHA-256 of the CA certificate's DER, printed as
// "sha256:" followed by 64 lowercase hex digits (Fingerprint). ParseFingerprint
// also accepts upper case and colons between the bytes, as other tools
// print it. Clients pin the CA with that value or trust its PEM file.
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/atomicfile"
)

// File names inside the CA directory.
const (
	CACertFile     = "ca.crt"
	CAKeyFile      = "ca.key"
	ServerCertFile = "server.crt"
	ServerKeyFile  = "server.key"
)

// Lifetimes and the renewal margin of issued certificates.
const (
	CAValidity     = 10 * 365 * 24 * time.Hour
	ServerValidity = 90 * 24 * time.Hour
	// RenewBefore: a server certificate that expires within this margin is
	// replaced when the keeper starts (or EnsureServer is called).
	RenewBefore = 30 * 24 * time.Hour
)

// CA is a certificate authority whose key is held in memory.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// PEM is the CA certificate in PEM form, as clients are given it.
	PEM []byte
}

// LoadOrCreateCA returns the CA kept in dir (ca.crt, ca.key), creating dir
// (0700) and a new CA when there is none. A directory with one of the two
// files but not the other is an error: nothing is overwritten.
func LoadOrCreateCA(dir string, now time.Time) (*CA, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create CA dir: %w", err)
	}
	certPath, keyPath := filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile)
	certPEM, certErr := os.ReadFile(certPath)
	keyPEM, keyErr := os.ReadFile(keyPath)
	switch {
	case certErr == nil && keyErr == nil:
		return parseCA(certPEM, keyPEM)
	case errors.Is(certErr, os.ErrNotExist) && errors.Is(keyErr, os.ErrNotExist):
	case certErr != nil && !errors.Is(certErr, os.ErrNotExist):
		return nil, fmt.Errorf("read CA certificate: %w", certErr)
	case keyErr != nil && !errors.Is(keyErr, os.ErrNotExist):
		return nil, fmt.Errorf("read CA key: %w", keyErr)
	default:
		return nil, fmt.Errorf("CA dir %s holds only one of %s and %s; restore the other or remove both to make a new CA", dir, CACertFile, CAKeyFile)
	}
	ca, keyDER, err := newCA(now)
	if err != nil {
		return nil, err
	}
	// The key first: a certificate without its key is never left behind
	// by a crash between the two writes in a way that looks complete.
	if err := atomicfile.Write(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return nil, err
	}
	if err := atomicfile.Write(certPath, ca.PEM, 0o644); err != nil {
		return nil, err
	}
	return ca, nil
}

func newCA(now time.Time) (*CA, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate CA key: %w", err)
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, nil, err
	}
	host, _ := os.Hostname()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{Organization: []string{"Soul Stack"}, CommonName: "Soul Stack keeper CA " + host},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(CAValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return &CA{Cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, keyDER, nil
}

func parseCA(certPEM, keyPEM []byte) (*CA, error) {
	cert, err := ParseCertificatePEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	if !cert.IsCA {
		return nil, errors.New("CA certificate: not a CA certificate")
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, errors.New("CA key: no PEM block")
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	pub, ok := cert.PublicKey.(*ecdsa.PublicKey)
	if !ok || !pub.Equal(&key.PublicKey) {
		return nil, errors.New("CA key does not match the CA certificate")
	}
	return &CA{Cert: cert, key: key, PEM: certPEM}, nil
}

// Fingerprint returns the CA certificate's fingerprint.
func (ca *CA) Fingerprint() string { return client.Fingerprint(ca.Cert) }

// ParseCertificatePEM returns the first certificate of a PEM text.
func ParseCertificatePEM(b []byte) (*x509.Certificate, error) {
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			return nil, errors.New("no PEM CERTIFICATE block")
		}
		if block.Type == "CERTIFICATE" {
			return x509.ParseCertificate(block.Bytes)
		}
	}
}

// Hosts is what a server certificate must cover: DNS names and IP
// addresses.
type Hosts struct {
	DNSNames []string
	IPs      []net.IP
}

// ListenHosts returns the names and addresses a keeper listening on addr
// (host:port) is reached by: the host itself (for an unspecified host such
// as "" or 0.0.0.0, every address of this machine and its host name), plus
// localhost, 127.0.0.1 and ::1, plus extra names or addresses.
func ListenHosts(addr string, extra ...string) (Hosts, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return Hosts{}, fmt.Errorf("listen address %q: %w", addr, err)
	}
	var h Hosts
	names := append([]string{"localhost", "127.0.0.1", "::1"}, extra...)
	ip := net.ParseIP(host)
	switch {
	case host == "" || (ip != nil && ip.IsUnspecified()):
		if hn, err := os.Hostname(); err == nil && hn != "" {
			names = append(names, hn)
		}
		addrs, err := net.InterfaceAddrs()
		if err != nil {
			return Hosts{}, fmt.Errorf("list this machine's addresses: %w", err)
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && !n.IP.IsLinkLocalUnicast() && !n.IP.IsUnspecified() {
				names = append(names, n.IP.String())
			}
		}
	default:
		names = append(names, host)
	}
	for _, n := range names {
		h.add(n)
	}
	return h, nil
}

func (h *Hosts) add(name string) {
	if name == "" {
		return
	}
	if ip := net.ParseIP(name); ip != nil {
		if !ip.IsUnspecified() && !slices.ContainsFunc(h.IPs, ip.Equal) {
			h.IPs = append(h.IPs, ip)
		}
		return
	}
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	if !slices.Contains(h.DNSNames, name) {
		h.DNSNames = append(h.DNSNames, name)
	}
}

// covers reports whether cert names every host of h.
func (h Hosts) coveredBy(cert *x509.Certificate) bool {
	for _, n := range h.DNSNames {
		if !slices.Contains(cert.DNSNames, n) {
			return false
		}
	}
	for _, ip := range h.IPs {
		if !slices.ContainsFunc(cert.IPAddresses, ip.Equal) {
			return false
		}
	}
	return true
}

// Issued tells what EnsureServer did.
type Issued int

// What EnsureServer did.
const (
	Reused Issued = iota
	Created
	Renewed
)

// EnsureServer returns the server certificate kept in dir (server.crt,
// server.key), issuing a new one signed by ca when there is none, when it
// expires within RenewBefore, when it does not cover hosts, or when it was
// not signed by ca. The chain it returns holds the server certificate and
// the CA certificate, so that clients that pin the CA see it.
func (ca *CA) EnsureServer(dir string, hosts Hosts, now time.Time) (tls.Certificate, Issued, error) {
	certPath, keyPath := filepath.Join(dir, ServerCertFile), filepath.Join(dir, ServerKeyFile)
	state := Created
	if cert, err := tls.LoadX509KeyPair(certPath, keyPath); err == nil {
		state = Renewed
		leaf := cert.Leaf
		if leaf != nil && hosts.coveredBy(leaf) && now.Add(RenewBefore).Before(leaf.NotAfter) &&
			leaf.CheckSignatureFrom(ca.Cert) == nil {
			cert.Certificate = append(cert.Certificate[:1:1], ca.Cert.Raw)
			return cert, Reused, nil
		}
	}
	certPEM, keyPEM, err := ca.issueServer(hosts, now)
	if err != nil {
		return tls.Certificate{}, 0, err
	}
	if err := atomicfile.Write(keyPath, keyPEM, 0o600); err != nil {
		return tls.Certificate{}, 0, err
	}
	if err := atomicfile.Write(certPath, certPEM, 0o644); err != nil {
		return tls.Certificate{}, 0, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, 0, err
	}
	cert.Certificate = append(cert.Certificate[:1:1], ca.Cert.Raw)
	return cert, state, nil
}

// ServerSource serves the server certificate of dir to TLS handshakes and
// renews it (EnsureServer) once it is within RenewBefore of expiry, so that
// a keeper that runs for months never presents an expired certificate.
type ServerSource struct {
	ca    *CA
	dir   string
	hosts Hosts
	now   func() time.Time

	mu   sync.Mutex
	cert tls.Certificate
}

// NewServerSource returns a source over dir that starts with cert (as
// EnsureServer returned it).
func (ca *CA) NewServerSource(dir string, hosts Hosts, cert tls.Certificate, now func() time.Time) *ServerSource {
	return &ServerSource{ca: ca, dir: dir, hosts: hosts, now: now, cert: cert}
}

// GetCertificate is a tls.Config GetCertificate. When renewing fails it
// keeps serving the current certificate and returns the error only once
// that has expired.
func (s *ServerSource) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if s.cert.Leaf != nil && now.Add(RenewBefore).Before(s.cert.Leaf.NotAfter) {
		return &s.cert, nil
	}
	cert, _, err := s.ca.EnsureServer(s.dir, s.hosts, now)
	if err != nil {
		if s.cert.Leaf != nil && now.Before(s.cert.Leaf.NotAfter) {
			return &s.cert, nil
		}
		return nil, err
	}
	s.cert = cert
	return &s.cert, nil
}

// issueServer signs a new server certificate for hosts.
func (ca *CA) issueServer(hosts Hosts, now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate server key: %w", err)
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, nil, err
	}
	cn := "keeper"
	if len(hosts.DNSNames) > 0 {
		cn = hosts.DNSNames[len(hosts.DNSNames)-1]
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{Organization: []string{"Soul Stack"}, CommonName: cn},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(ServerValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     hosts.DNSNames,
		IPAddresses:  hosts.IPs,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("create server certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

func serialNumber() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("generate serial number: %w", err)
	}
	return n.Add(n, big.NewInt(1)), nil
}
