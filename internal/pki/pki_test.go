package pki_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/pki"
)

// TestRenewServerCertificate: a server certificate that no longer covers
// the listen address is replaced by one that does, from the same CA.
func TestRenewServerCertificate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	now := time.Now()
	ca, err := pki.LoadOrCreateCA(dir, now)
	if err != nil {
		t.Fatal(err)
	}
	only := func(addr string) pki.Hosts {
		h, err := pki.ListenHosts(addr)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	if _, st, err := ca.EnsureServer(dir, only("127.0.0.2:1"), now); err != nil || st != pki.Created {
		t.Fatalf("first server certificate: %v %v", st, err)
	}
	if _, st, _ := ca.EnsureServer(dir, only("127.0.0.2:1"), now); st != pki.Reused {
		t.Fatalf("same hosts: %v, want reused", st)
	}
	cert, st, err := ca.EnsureServer(dir, only("127.0.0.3:1"), now)
	if err != nil || st != pki.Renewed || cert.Leaf.VerifyHostname("127.0.0.3") != nil {
		t.Fatalf("new address: %v %v", st, err)
	}
	if _, st, _ := ca.EnsureServer(dir, only("127.0.0.3:1"), now.Add(pki.ServerValidity-pki.RenewBefore+time.Hour)); st != pki.Renewed {
		t.Fatalf("near expiry: %v, want renewed", st)
	}
	again, err := pki.LoadOrCreateCA(dir, now)
	if err != nil || again.Fingerprint() != ca.Fingerprint() {
		t.Fatalf("CA not reloaded: %v", err)
	}
}

// TestCAFiles: a new CA's keys are 0600, a half-present CA is refused
// rather than overwritten, and the fingerprint reads back in every
// accepted form and equals the client's.
func TestCAFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, err := pki.LoadOrCreateCA(dir, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	hosts, _ := pki.ListenHosts("0.0.0.0:1", "keeper.example.com")
	if _, _, err := ca.EnsureServer(dir, hosts, time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{pki.CAKeyFile, pki.ServerKeyFile} {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v, want mode 0600", f, fi.Mode().Perm(), err)
		}
	}
	fp := ca.Fingerprint()
	if fp != client.Fingerprint(ca.Cert) || !strings.HasPrefix(fp, "sha256:") || len(fp) != 7+64 {
		t.Fatalf("fingerprint %s, client says %s", fp, client.Fingerprint(ca.Cert))
	}
	hex := fp[7:]
	var colons []string
	for i := 0; i < len(hex); i += 2 {
		colons = append(colons, strings.ToUpper(hex[i:i+2]))
	}
	for _, form := range []string{fp, hex, strings.ToUpper(hex), "SHA256:" + strings.Join(colons, ":")} {
		if _, err := client.ParseFingerprint(form); err != nil {
			t.Errorf("ParseFingerprint(%s): %v", form, err)
		}
		if _, err := client.ParseFingerprint(form); err != nil {
			t.Errorf("client.ParseFingerprint(%s): %v", form, err)
		}
	}
	if _, err := client.ParseFingerprint("sha256:abcd"); err == nil {
		t.Error("a short fingerprint was accepted")
	}
	if err := os.Remove(filepath.Join(dir, pki.CAKeyFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := pki.LoadOrCreateCA(dir, time.Now()); err == nil || !strings.Contains(err.Error(), "only one of") {
		t.Fatalf("a CA without its key: %v", err)
	}
}

// TestServerSourceRenewsWhileServing: a long-running keeper's source
// hands out a fresh certificate once the one it serves nears expiry.
func TestServerSourceRenewsWhileServing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	start := time.Now()
	ca, err := pki.LoadOrCreateCA(dir, start)
	if err != nil {
		t.Fatal(err)
	}
	hosts, _ := pki.ListenHosts("127.0.0.1:1")
	cert, _, err := ca.EnsureServer(dir, hosts, start)
	if err != nil {
		t.Fatal(err)
	}
	now := start
	src := ca.NewServerSource(dir, hosts, cert, func() time.Time { return now })
	first, err := src.GetCertificate(nil)
	if err != nil || !first.Leaf.NotAfter.Equal(cert.Leaf.NotAfter) {
		t.Fatalf("first handshake: %v", err)
	}
	now = start.Add(pki.ServerValidity - pki.RenewBefore + time.Hour)
	renewed, err := src.GetCertificate(nil)
	if err != nil || !renewed.Leaf.NotAfter.After(cert.Leaf.NotAfter) {
		t.Fatalf("near expiry: not renewed (%v)", err)
	}
	if renewed.Leaf.CheckSignatureFrom(ca.Cert) != nil || len(renewed.Certificate) != 2 {
		t.Fatal("the renewed certificate is not signed by the CA or lacks the CA in its chain")
	}
}
