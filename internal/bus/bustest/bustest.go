// Package bustest helps tests run the agent transport for real: a keeper
// CA, soul identities issued by it, a registry of their serials, and
// agents in processes of their own (the test binary re-executed, see
// RunAgentIfAsked).
package bustest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/agent"
	"github.com/soulstack/soulstack/internal/agent/wire"
	"github.com/soulstack/soulstack/internal/pki"
	"github.com/soulstack/soulstack/internal/testlog"
	"github.com/soulstack/soulstack/internal/tracing"
)

// CA is a keeper CA in a temporary directory with a server certificate
// for 127.0.0.1.
type CA struct {
	*pki.CA
	Dir        string
	ServerCert func(*tls.ClientHelloInfo) (*tls.Certificate, error)
}

// NewCA makes a keeper CA for tb.
func NewCA(tb testing.TB) *CA {
	tb.Helper()
	dir := tb.TempDir()
	now := time.Now()
	ca, err := pki.LoadOrCreateCA(dir, now)
	if err != nil {
		tb.Fatal(err)
	}
	hosts, err := pki.ListenHosts("127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "nats"), 0o700); err != nil {
		tb.Fatal(err)
	}
	cert, _, err := ca.EnsureServer(filepath.Join(dir, "nats"), hosts, now)
	if err != nil {
		tb.Fatal(err)
	}
	return &CA{CA: ca, Dir: dir, ServerCert: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &cert, nil }}
}

// Identity is a soul's key and certificate.
type Identity struct {
	SID     string
	Serial  string
	CertPEM []byte
	KeyPEM  []byte
	CAPEM   []byte
}

// Issue makes a key pair for sid and has ca sign its certificate, valid
// from now for ttl.
func Issue(tb testing.TB, ca *pki.CA, sid string, ttl time.Duration, now time.Time) Identity {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: sid}}, key)
	if err != nil {
		tb.Fatal(err)
	}
	csr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		tb.Fatal(err)
	}
	cc, err := ca.IssueClient(csr, sid, ttl, now)
	if err != nil {
		tb.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	return Identity{SID: sid, Serial: cc.Serial, CertPEM: cc.PEM, KeyPEM: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}),
		CAPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw})}
}

// TLS returns the agent's TLS config for id.
func (id Identity) TLS() (*tls.Config, error) {
	cert, err := tls.X509KeyPair(id.CertPEM, id.KeyPEM)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(id.CAPEM) {
		return nil, fmt.Errorf("no CA certificate")
	}
	return &tls.Config{
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil },
		RootCAs:              pool,
		MinVersion:           tls.VersionTLS12,
	}, nil
}

// Registry is an in-memory bus.Identities: the serial each soul holds.
type Registry struct {
	mu      sync.Mutex
	serials map[string]string
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{serials: map[string]string{}} }

// Set records serial as sid's current certificate; "" removes the soul
// (destroyed).
func (r *Registry) Set(sid, serial string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if serial == "" {
		delete(r.serials, sid)
		return
	}
	r.serials[sid] = serial
}

// SoulCert implements bus.Identities.
func (r *Registry) SoulCert(_ context.Context, sid string) (string, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.serials[sid]
	return s, ok, nil
}

// envAgent carries an AgentSpec to a re-executed test binary.
const envAgent = "SOULSTACK_TEST_AGENT_SPEC"

// AgentSpec is what an agent process serves: identities (one NATS
// connection each) on urls.
type AgentSpec struct {
	URLs       []string   `json:"urls"`
	Identities []Identity `json:"identities"`
	Heartbeat  time.Duration
	// NoExec answers every command with exit 0 without running anything:
	// for benchmarks of the bus itself.
	NoExec bool `json:"no_exec"`
	// Stagger is the pause between starting two agents of the process, as
	// a fleet that does not connect all in the same millisecond.
	Stagger time.Duration `json:"stagger"`
	// Jitter is each agent's agent.Config.Jitter: 0 its default (the
	// heartbeat interval), negative none.
	Jitter time.Duration `json:"jitter"`
	// Spool, when set, is where each agent spools its durable commands
	// (Spool/<sid>), as a soul's state dir does.
	Spool string `json:"spool"`
	// OTLPEndpoint, when set, exports the agents' traces there, as
	// OTEL_EXPORTER_OTLP_ENDPOINT does for soul run.
	OTLPEndpoint string `json:"otlp_endpoint"`
}

// RunAgentIfAsked turns the test binary into an agent process when
// StartAgents started it: it serves every identity of the spec until
// SIGTERM and exits. Call it first in TestMain.
func RunAgentIfAsked() {
	// A durable command's supervisor is this binary again.
	agent.SuperviseIfAsked()
	path := os.Getenv(envAgent)
	if path == "" {
		return
	}
	var s AgentSpec
	spec, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(spec, &s)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "agent spec:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	shutdown, err := tracing.Setup(ctx, tracing.Config{Endpoint: s.OTLPEndpoint, Service: "soulstack-soul"})
	if err != nil {
		fmt.Fprintln(os.Stderr, "agent tracing:", err)
		os.Exit(2)
	}
	var wg sync.WaitGroup
	for _, id := range s.Identities {
		tc, err := id.TLS()
		if err != nil {
			fmt.Fprintln(os.Stderr, "agent identity:", err)
			os.Exit(2)
		}
		cfg := agent.Config{SID: id.SID, URLs: s.URLs, TLS: tc, Logger: log.With("sid", id.SID), Heartbeat: s.Heartbeat, ReconnectWait: time.Second, Jitter: s.Jitter}
		if s.NoExec {
			cfg.Exec = func(context.Context, wire.ExecRequest) agent.Outcome { return agent.Outcome{} }
		}
		if s.Spool != "" {
			cfg.Spool = filepath.Join(s.Spool, wire.Token(id.SID))
		}
		if s.Stagger > 0 {
			time.Sleep(s.Stagger)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := agent.Serve(ctx, cfg); err != nil {
				fmt.Fprintln(os.Stderr, "agent:", err)
			}
		}()
	}
	wg.Wait()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_ = shutdown(sctx)
	cancel()
	os.Exit(0)
}

// Agents is a running agent process.
type Agents struct {
	Cmd *exec.Cmd
	log testlog.Buffer
}

// Log is what the process logged (warnings and errors).
func (a *Agents) Log() string { return a.log.String() }

// Stop ends the process (SIGTERM, then SIGKILL) and waits for it. It
// reports whether SIGTERM was enough: an agent that does not stop when
// asked would hold a soul's shutdown open.
func (a *Agents) Stop() bool {
	if a.Cmd.ProcessState != nil {
		return true
	}
	_ = a.Cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { a.Cmd.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(10 * time.Second):
		_ = a.Cmd.Process.Kill()
		<-done
		return false
	}
}

// Kill ends the process at once, as a crash would.
func (a *Agents) Kill() {
	if a.Cmd.ProcessState != nil {
		return
	}
	_ = a.Cmd.Process.Kill()
	a.Cmd.Wait()
}

// StartAgents runs spec in a new process (the test binary, whose TestMain
// calls RunAgentIfAsked), stopped at cleanup.
func StartAgents(tb testing.TB, spec AgentSpec) *Agents {
	tb.Helper()
	b, err := json.Marshal(spec)
	if err != nil {
		tb.Fatal(err)
	}
	path := filepath.Join(tb.TempDir(), "agent-spec.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), envAgent+"="+path)
	a := &Agents{Cmd: cmd}
	cmd.Stderr = &a.log
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if !a.Stop() {
			tb.Errorf("agent process %d did not end within 10s of SIGTERM; killed", cmd.Process.Pid)
		}
		if tb.Failed() && a.Log() != "" {
			tb.Logf("agent process %d log:\n%s", cmd.Process.Pid, a.Log())
		}
	})
	return a
}

// WaitFor polls cond every 20ms until it holds or timeout passes.
func WaitFor(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
