package pki_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/pki"
)

func newCSR(t *testing.T, cn string) *x509.CertificateRequest {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: cn}}, key)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		t.Fatal(err)
	}
	return csr
}

func TestIssueClient(t *testing.T) {
	t.Parallel()
	now := time.Now()
	ca, err := pki.LoadOrCreateCA(t.TempDir(), now)
	if err != nil {
		t.Fatal(err)
	}
	// The CSR asks for another name: the certificate names the soul the
	// keeper says, not the one the requester asked for.
	cc, err := ca.IssueClient(newCSR(t, "other.example"), "web-0.lab.example", time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	sid, err := ca.VerifyClient(cc.Cert, now)
	if err != nil || sid != "web-0.lab.example" {
		t.Fatalf("VerifyClient = %q, %v; want web-0.lab.example", sid, err)
	}
	if cc.Serial == "" || cc.Serial != pki.SerialHex(cc.Cert) {
		t.Fatalf("serial %q", cc.Serial)
	}
	if _, err := ca.VerifyClient(cc.Cert, now.Add(2*time.Hour)); err == nil {
		t.Fatal("an expired client certificate verified")
	}
	other, err := pki.LoadOrCreateCA(t.TempDir(), now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.VerifyClient(cc.Cert, now); err == nil {
		t.Fatal("another CA accepted the soul's certificate")
	}
	// A server certificate of the same CA is no client identity.
	hosts, _ := pki.ListenHosts("127.0.0.1:8420")
	srv, _, err := ca.EnsureServer(t.TempDir(), hosts, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ca.VerifyClient(srv.Leaf, now); err == nil {
		t.Fatal("a server certificate verified as a soul's")
	}
	if _, err := pki.SoulSID(srv.Leaf); !errors.Is(err, pki.ErrNotSoul) {
		t.Fatalf("SoulSID(server cert) = %v, want ErrNotSoul", err)
	}
}

func TestIssueClientRefusesBadRequests(t *testing.T) {
	t.Parallel()
	now := time.Now()
	ca, err := pki.LoadOrCreateCA(t.TempDir(), now)
	if err != nil {
		t.Fatal(err)
	}
	csr := newCSR(t, "x")
	for _, sid := range []string{"", "a/b", "a b"} {
		if _, err := ca.IssueClient(csr, sid, 0, now); err == nil {
			t.Errorf("IssueClient(%q) succeeded", sid)
		}
	}
	bad := *csr
	bad.Signature = append([]byte(nil), csr.Signature...)
	bad.Signature[len(bad.Signature)-1] ^= 0xff
	if _, err := ca.IssueClient(&bad, "web-0", 0, now); err == nil {
		t.Error("a CSR with a broken signature was signed")
	}
}
