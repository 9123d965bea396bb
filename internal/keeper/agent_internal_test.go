package keeper

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/pki"
	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/testdb"
)

// TestAuthorizeSoul: the rule the agent bus applies to a connecting soul.
// Only the current certificate of a live soul from this keeper's CA
// passes; a certificate of another CA, of an unknown soul, a replaced one
// and one of a destroyed soul are refused with their codes.
func TestAuthorizeSoul(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Now()
	ca, err := pki.LoadOrCreateCA(t.TempDir(), now)
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.LoadOrCreateCA(t.TempDir(), now)
	if err != nil {
		t.Fatal(err)
	}
	a := &agentSide{ca: ca}
	st := testdb.SQLite.Open(t)
	issue := func(ca *pki.CA, sid string) pki.ClientCert {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		der, _ := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
		csr, _ := x509.ParseCertificateRequest(der)
		c, err := ca.IssueClient(csr, sid, time.Hour, now)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if _, err := st.SoulCreate(ctx, store.SoulCreateParams{Soul: store.Soul{SID: "web-1.x.test", Connection: store.Connection{Transport: "ssh", User: "root", Port: 22}}, Actor: "tok_t"}); err != nil {
		t.Fatal(err)
	}
	current := issue(ca, "web-1.x.test")
	if _, err := st.DB().Exec(`UPDATE souls SET cert_serial = ? WHERE sid = 'web-1.x.test'`, current.Serial); err != nil {
		t.Fatal(err)
	}
	if so, err := a.AuthorizeSoul(ctx, st, current.Cert, now); err != nil || so.SID != "web-1.x.test" {
		t.Fatalf("the current certificate = %+v, %v", so, err)
	}
	for name, tc := range map[string]struct {
		cert *x509.Certificate
		want string
	}{
		"another CA":   {issue(other, "web-1.x.test").Cert, "join.cert_invalid"},
		"unknown soul": {issue(ca, "nobody.x.test").Cert, store.JoinSoulNotFound},
		"replaced":     {issue(ca, "web-1.x.test").Cert, store.JoinCertRevoked},
		"expired":      {current.Cert, "join.cert_invalid"},
	} {
		at := now
		if name == "expired" {
			at = now.Add(2 * time.Hour)
		}
		_, err := a.AuthorizeSoul(ctx, st, tc.cert, at)
		var re *store.JoinRefusedError
		if !errors.As(err, &re) || re.Reason != tc.want {
			t.Errorf("%s: %v; want %s", name, err, tc.want)
		}
	}
	if _, err := st.DB().Exec(`UPDATE souls SET status = 'destroyed', cert_serial = '' WHERE sid = 'web-1.x.test'`); err != nil {
		t.Fatal(err)
	}
	var re *store.JoinRefusedError
	if _, err := a.AuthorizeSoul(ctx, st, current.Cert, now); !errors.As(err, &re) || re.Reason != store.JoinSoulDestroyed {
		t.Fatalf("a destroyed soul's certificate: %v", err)
	}
}
