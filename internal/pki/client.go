package pki

import (
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// ClientValidity is the default lifetime of a soul's client certificate:
// short, because the agent renews it long before it expires and a
// destroyed soul's identity must stop working soon even where the
// revocation has not reached.
const ClientValidity = 24 * time.Hour

// soulURIScheme and soulURIHost make the URI SAN that names a soul in its
// client certificate: soulstack://soul/<sid>.
const (
	soulURIScheme = "soulstack"
	soulURIHost   = "soul"
)

// ErrNotSoul is returned by SoulSID for a certificate that does not name
// exactly one soul.
var ErrNotSoul = errors.New("certificate names no soul")

// ClientCert is a client certificate the CA issued for one soul.
type ClientCert struct {
	Cert *x509.Certificate
	// PEM is the certificate in PEM form, as the soul is given it.
	PEM []byte
	// Serial is the certificate's serial number in lowercase hex, as the
	// registry stores it.
	Serial string
}

// IssueClient signs a client certificate for soul sid over the public key
// of csr, valid from now for ttl (ClientValidity when ttl is 0). The
// CSR's signature must verify; everything else it asks for (subject,
// names, extensions) is ignored: the certificate names the soul by its
// common name and the URI SAN soulstack://soul/<sid>, and is good for TLS
// client authentication only.
func (ca *CA) IssueClient(csr *x509.CertificateRequest, sid string, ttl time.Duration, now time.Time) (ClientCert, error) {
	if err := csr.CheckSignature(); err != nil {
		return ClientCert{}, fmt.Errorf("certificate request: %w", err)
	}
	if sid == "" || strings.ContainsAny(sid, "/ \t\n") {
		return ClientCert{}, fmt.Errorf("soul id %q cannot be named in a certificate", sid)
	}
	if ttl <= 0 {
		ttl = ClientValidity
	}
	serial, err := serialNumber()
	if err != nil {
		return ClientCert{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{Organization: []string{"Soul Stack"}, OrganizationalUnit: []string{"soul"}, CommonName: sid},
		NotBefore:    now.Add(-5 * time.Minute),
		NotAfter:     now.Add(ttl),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		URIs:         []*url.URL{soulURI(sid)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, csr.PublicKey, ca.key)
	if err != nil {
		return ClientCert{}, fmt.Errorf("create client certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return ClientCert{}, err
	}
	return ClientCert{Cert: cert, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), Serial: SerialHex(cert)}, nil
}

func soulURI(sid string) *url.URL {
	return &url.URL{Scheme: soulURIScheme, Host: soulURIHost, Path: "/" + sid}
}

// SerialHex is a certificate's serial number in lowercase hex.
func SerialHex(cert *x509.Certificate) string { return cert.SerialNumber.Text(16) }

// VerifyClient checks that cert was issued by this CA for TLS client
// authentication and is valid at now, and returns the SID it names. It
// does not consult the registry: whether that soul still holds this
// certificate (its current serial, not destroyed) is the caller's check.
func (ca *CA) VerifyClient(cert *x509.Certificate, now time.Time) (string, error) {
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return "", err
	}
	return SoulSID(cert)
}

// SoulSID returns the SID a soul's client certificate names: its one
// soulstack://soul/<sid> URI SAN, which must agree with its common name.
func SoulSID(cert *x509.Certificate) (string, error) {
	var sid string
	for _, u := range cert.URIs {
		if u.Scheme != soulURIScheme || u.Host != soulURIHost {
			continue
		}
		if sid != "" {
			return "", ErrNotSoul
		}
		sid = strings.TrimPrefix(u.Path, "/")
	}
	if sid == "" || sid != cert.Subject.CommonName {
		return "", ErrNotSoul
	}
	return sid, nil
}
