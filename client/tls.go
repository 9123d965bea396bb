package client

import (
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"
)

// Options are a client's optional settings: whom it trusts on an https://
// keeper. With neither field set the system's roots decide, which refuse
// the CA a keeper makes itself.
type Options struct {
	// CAFile is a PEM file of CA certificates to trust instead of the
	// system's: the keeper's <data-dir>/tls/ca.crt, or the CA that issued
	// tls.cert_file.
	CAFile string
	// CAFingerprint pins a certificate of the keeper's chain (its CA, or
	// the server certificate itself) by the SHA-256 of its DER, written as
	// "sha256:<64 hex digits>" as the keeper logs it (colons and upper
	// case are accepted). The server certificate must still name the host
	// and chain to the pinned certificate.
	CAFingerprint string
	// Transport, when set, carries the requests instead of the network
	// (the keeper's MCP server calls its own API in process this way);
	// CAFile and CAFingerprint then do not apply.
	Transport http.RoundTripper
}

// CertificateError is returned when the keeper presents a certificate the
// client does not trust: unknown CA, wrong host name, or a fingerprint
// other than the pinned one.
type CertificateError struct {
	// URL is the keeper's URL.
	URL string
	// Fingerprint is the fingerprint of the top certificate the keeper
	// presented (its CA when it sends one), to compare with what the
	// keeper logged before trusting it.
	Fingerprint string
	// Err is the verification failure.
	Err error
}

func (e *CertificateError) Error() string {
	msg := fmt.Sprintf("the keeper at %s presented a certificate this client does not trust: %v", e.URL, e.Err)
	if e.Fingerprint != "" {
		msg += " (presented CA " + e.Fingerprint + ")"
	}
	return msg
}

func (e *CertificateError) Unwrap() error { return e.Err }

// ErrFingerprintMismatch: no certificate of the keeper's chain has the
// pinned fingerprint.
var ErrFingerprintMismatch = errors.New("no certificate of the keeper's chain has the pinned fingerprint")

// Fingerprint returns "sha256:<hex>" of a certificate's DER: the form the
// keeper logs its CA by.
func Fingerprint(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.Raw)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// ParseFingerprint returns the 32 bytes of a fingerprint written as
// "sha256:<hex>", bare hex, or hex with colons, in either case.
func ParseFingerprint(s string) ([]byte, error) {
	v := strings.TrimSpace(s)
	if i := strings.IndexByte(v, ':'); i >= 0 && strings.EqualFold(v[:i], "sha256") {
		v = v[i+1:]
	}
	b, err := hex.DecodeString(strings.ReplaceAll(v, ":", ""))
	if err != nil || len(b) != sha256.Size {
		return nil, fmt.Errorf("fingerprint %q: want sha256: followed by 64 hex digits", s)
	}
	return b, nil
}

// httpClient builds the HTTP client for o.
// HTTPClient returns the HTTP client New uses for these options: the
// keeper's trust settings, a 60 s timeout per request. soulctl mcp talks to
// the keeper's /mcp with it.
func (o Options) HTTPClient() (*http.Client, error) { return o.httpClient() }

func (o Options) httpClient() (*http.Client, error) {
	hc := &http.Client{Timeout: 60 * time.Second}
	if o.Transport != nil {
		hc.Transport = o.Transport
		return hc, nil
	}
	if o.CAFile == "" && o.CAFingerprint == "" {
		return hc, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.CAFile != "" {
		b, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("CA file %s: no PEM certificate in it", o.CAFile)
		}
		cfg.RootCAs = pool
	}
	if o.CAFingerprint != "" {
		pin, err := ParseFingerprint(o.CAFingerprint)
		if err != nil {
			return nil, err
		}
		roots := cfg.RootCAs
		// The standard verification is replaced by verifyPinned, which
		// verifies the chain against the pinned certificate (and the CA
		// file, when given) and the host name itself.
		cfg.InsecureSkipVerify = true
		cfg.VerifyConnection = func(cs tls.ConnectionState) error { return verifyPinned(cs, pin, roots) }
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = cfg
	hc.Transport = tr
	return hc, nil
}

// verifyPinned accepts the connection when the server certificate is valid
// for the host, chains to a certificate with fingerprint pin that the
// server presented (or is that certificate), and, with roots, also chains
// to roots.
func verifyPinned(cs tls.ConnectionState, pin []byte, roots *x509.CertPool) error {
	certs := cs.PeerCertificates
	fail := func(err error) error {
		return &tls.CertificateVerificationError{UnverifiedCertificates: certs, Err: err}
	}
	if len(certs) == 0 {
		return fail(errors.New("the keeper presented no certificate"))
	}
	var pinned *x509.Certificate
	for _, c := range certs {
		sum := sha256.Sum256(c.Raw)
		if subtle.ConstantTimeCompare(sum[:], pin) == 1 {
			pinned = c
			break
		}
	}
	if pinned == nil {
		return fail(ErrFingerprintMismatch)
	}
	leaf := certs[0]
	opts := x509.VerifyOptions{DNSName: cs.ServerName, Intermediates: x509.NewCertPool(), Roots: x509.NewCertPool()}
	opts.Roots.AddCert(pinned)
	for _, c := range certs[1:] {
		opts.Intermediates.AddCert(c)
	}
	if pinned == leaf {
		// A pinned server certificate: its names are checked, it need not
		// be a CA.
		if err := leaf.VerifyHostname(cs.ServerName); err != nil {
			return fail(err)
		}
		if now := time.Now(); now.Before(leaf.NotBefore) || now.After(leaf.NotAfter) {
			return fail(x509.CertificateInvalidError{Cert: leaf, Reason: x509.Expired})
		}
	} else if _, err := leaf.Verify(opts); err != nil {
		return fail(err)
	}
	if roots != nil {
		opts.Roots = roots
		if _, err := leaf.Verify(opts); err != nil {
			return fail(err)
		}
	}
	return nil
}

// certificateError turns a TLS verification failure of a request into a
// *CertificateError; other errors are returned as they are.
func (c *Client) certificateError(err error) error {
	var cve *tls.CertificateVerificationError
	if !errors.As(err, &cve) {
		return err
	}
	e := &CertificateError{URL: c.base.String(), Err: cve.Err}
	if n := len(cve.UnverifiedCertificates); n > 0 {
		e.Fingerprint = Fingerprint(cve.UnverifiedCertificates[n-1])
	}
	return e
}
