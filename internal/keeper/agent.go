package keeper

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"debug/elf"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/soulstack/soulstack/internal/base"
	"github.com/soulstack/soulstack/internal/transport/ssh"

	"github.com/soulstack/soulstack/internal/api"
	"github.com/soulstack/soulstack/internal/config"
	"github.com/soulstack/soulstack/internal/pki"
	"github.com/soulstack/soulstack/internal/store"
)

// LocalGatewayName is the name every local or QEMU VM's /etc/hosts gives
// its bridge's address, where the host (and so the keeper) answers it.
const LocalGatewayName = "soulstack-local-gateway"

// localDriver is the driver whose VMs share the host's kernel.
const localDriver = "local"

// onHost reports whether the VMs of driver run on the keeper's host and
// reach it on their bridge as LocalGatewayName: the local driver's and
// the QEMU driver's.
func onHost(driver string) bool { return driver == localDriver || driver == "qemu" }

// agentSide is the keeper's side of souls that onboard themselves: the
// CA that signs their certificates, the agent listener (TLS with that
// CA, client certificates verified when given) and what userdata
// advertises.
type agentSide struct {
	ca *pki.CA
	// ln is the agent listener's TCP socket; nil when agent_listen is off.
	ln   net.Listener
	port int
	// advertise is advertise_url ("" for the per-driver default).
	advertise string
	// fallbackHost is keeper_url's host, for non-local providers when
	// advertise_url is empty.
	fallbackHost string
	binary       string
	binarySum    string
	tls          *tls.Config
	// busURLs returns the agent bus's URLs for soul sid's join answer; nil
	// while the keeper serves no bus (see agentBusURLs).
	busURLs func(ctx context.Context, sid string) []string
}

func (a *agentSide) agentURLs(ctx context.Context, sid string) []string {
	if a.busURLs == nil {
		return nil
	}
	return a.busURLs(ctx, sid)
}

// newAgentSide loads the keeper CA and binds the agent listener, before
// the plugins start, so that the local driver learns its port.
func newAgentSide(c config.Config, b base.Base) (*agentSide, error) {
	log, clock := b.Log, b.Clock
	now := clock.Now()
	ca, err := pki.LoadOrCreateCA(c.TLSDir(), now)
	if err != nil {
		return nil, fmt.Errorf("keeper CA in %s: %w", c.TLSDir(), err)
	}
	a := &agentSide{ca: ca, advertise: c.AdvertiseURL}
	if u, err := url.Parse(c.KeeperURL); err == nil {
		a.fallbackHost = u.Hostname()
	}
	if c.AgentListen == config.AgentListenOff {
		log.Info("agent listener off (agent_listen: off): self-onboarding VMs cannot join")
		return a, nil
	}
	ln, err := net.Listen("tcp", c.AgentListen)
	if err != nil {
		return nil, fmt.Errorf("agent_listen on %s: %w", c.AgentListen, err)
	}
	a.ln = ln
	a.port = ln.Addr().(*net.TCPAddr).Port
	extra := []string{LocalGatewayName}
	if u, err := url.Parse(c.AdvertiseURL); err == nil && u.Hostname() != "" {
		extra = append(extra, u.Hostname())
	}
	if a.fallbackHost != "" {
		extra = append(extra, a.fallbackHost)
	}
	hosts, err := pki.ListenHosts(net.JoinHostPort(hostOf(c.AgentListen), strconv.Itoa(a.port)), extra...)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("agent listener: %w", err)
	}
	dir := filepath.Join(c.TLSDir(), "agent")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		ln.Close()
		return nil, err
	}
	cert, _, err := ca.EnsureServer(dir, hosts, now)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("agent listener certificate in %s: %w", dir, err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	a.tls = &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: ca.NewServerSource(dir, hosts, cert, clock.Now).GetCertificate,
		// A soul renews with its current certificate; joins have none.
		ClientAuth: tls.VerifyClientCertIfGiven,
		ClientCAs:  pool,
		NextProtos: []string{"h2", "http/1.1"},
	}
	a.binary = agentBinary(c)
	if a.binary != "" {
		if a.binarySum, err = api.FileSHA256(a.binary); err != nil {
			log.Warn("agent binary unreadable: userdata will not install the agent", "path", a.binary, "err", err)
			a.binary = ""
		}
	}
	if a.binary == "" {
		log.Warn("no soul binary to serve (agent_binary): self-onboarding VMs get their bootstrap file but do not join by themselves")
	}
	return a, nil
}

func hostOf(addr string) string {
	h, _, _ := net.SplitHostPort(addr)
	return h
}

// agentBinary is agent_binary, or the soul binary next to the keeper's
// executable, or in the plugin dir; "" when there is none.
func agentBinary(c config.Config) string {
	if c.AgentBinary != "" {
		return c.AgentBinary
	}
	var candidates []string
	if exe, err := os.Executable(); err == nil {
		candidates = append(candidates, filepath.Join(filepath.Dir(exe), "soul"))
	}
	candidates = append(candidates, filepath.Join(c.PluginDir, "soul"))
	for _, p := range candidates {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p
		}
	}
	return ""
}

// advertised is the agent listener's URL as VMs of driver reach it.
func (a *agentSide) advertised(driver string) string {
	switch {
	case a == nil || a.ln == nil:
		return ""
	case a.advertise != "":
		return a.advertise
	case onHost(driver) || a.fallbackHost == "":
		return "https://" + net.JoinHostPort(LocalGatewayName, strconv.Itoa(a.port))
	}
	return "https://" + net.JoinHostPort(a.fallbackHost, strconv.Itoa(a.port))
}

// userdataVars are the agent's values for the cloud_init template.
func (a *agentSide) userdataVars(driver string) map[string]any {
	// Every VM, a local one included, keeps its host keys in /etc/ssh.
	v := map[string]any{"CAFingerprint": "", "CAPEMBase64": "", "AgentURL": "", "AgentSHA256": "", "StateDir": "/var/lib/soulstack", "HostKeyDir": "/etc/ssh"}
	if a == nil {
		return v
	}
	v["CAFingerprint"] = a.ca.Fingerprint()
	v["CAPEMBase64"] = base64.StdEncoding.EncodeToString(a.ca.PEM)
	if u := a.advertised(driver); u != "" && a.binary != "" {
		v["AgentURL"] = u + api.AgentBinaryPath
		v["AgentSHA256"] = a.binarySum
	}
	return v
}

// server is the agent listener's HTTP server for the agent API h.
func (a *agentSide) server(c config.Config, h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		TLSConfig:         a.tls,
		ReadHeaderTimeout: c.HTTP.ReadHeaderTimeout.Std(),
		ReadTimeout:       c.HTTP.ReadTimeout.Std(),
		WriteTimeout:      5 * time.Minute, // the soul binary download
		IdleTimeout:       c.HTTP.IdleTimeout.Std(),
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// serve serves srv on the agent listener until it is shut down; its serve
// error goes to errc.
func (a *agentSide) serve(srv *http.Server, c config.Config, log *slog.Logger, errc chan<- error) {
	ln := tls.NewListener(limitConns(a.ln, c.HTTP.MaxConnsPerClient, log), a.tls)
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("agent listener: %w", err)
		}
	}()
	log.Info("agent listener", "addr", "https://"+a.ln.Addr().String(), "advertised_local", a.advertised(localDriver),
		"ca_fingerprint", a.ca.Fingerprint(), "agent_binary", a.binary)
}

// executor is the soul binary SSH connections start to run their plain
// commands (ssh.Executor): the one the agent listener serves, for the
// architecture its ELF header names; nil when mode is off or there is
// none.
func (a *agentSide) executor(mode string, log *slog.Logger) *ssh.Executor {
	if a == nil || a.binary == "" || mode == "off" {
		return nil
	}
	f, err := elf.Open(a.binary)
	if err != nil {
		log.Warn("agent binary is not an ELF executable: SSH runs commands through a shell", "path", a.binary, "err", err)
		return nil
	}
	defer f.Close()
	arch := map[elf.Machine]string{elf.EM_X86_64: "amd64", elf.EM_AARCH64: "arm64"}[f.Machine]
	if arch == "" {
		log.Warn("agent binary of an architecture SSH does not run: commands go through a shell", "path", a.binary, "machine", f.Machine.String())
		return nil
	}
	return &ssh.Executor{Binaries: map[string]ssh.ExecutorBinary{arch: {Path: a.binary, SHA256: a.binarySum}}}
}

// hostPorts are the ports local VMs must reach on the host for the
// agent: the agent listener's.
func (a *agentSide) hostPorts() []string {
	if a == nil || a.ln == nil {
		return nil
	}
	return []string{strconv.Itoa(a.port)}
}

// joinConfig is the API's join configuration.
// guard bounds and audits the refused joins of both listeners.
func (a *agentSide) joinConfig(c config.Config, guard *api.JoinGuard) *api.JoinConfig {
	return &api.JoinConfig{
		CA: a.ca, AgentURLs: a.agentURLs, AgentBinary: a.binary, CertTTL: c.AgentCertValidity.Std(), Guard: guard,
	}
}

// soulGetter is the registry read AuthorizeSoul needs.
type soulGetter interface {
	SoulGet(ctx context.Context, sid string) (store.Soul, error)
}

// AuthorizeSoul is the rule for a soul that authenticates with its client
// certificate (renewal applies it in the store; the agent bus calls this):
// the certificate verifies against the keeper CA for client auth at now,
// and the soul it names exists, is not destroyed, and holds exactly this
// certificate's serial. A refusal is *store.JoinRefusedError with
// join.cert_invalid, join.soul_unknown, join.soul_destroyed or
// join.cert_revoked.
func (a *agentSide) AuthorizeSoul(ctx context.Context, souls soulGetter, cert *x509.Certificate, now time.Time) (store.Soul, error) {
	sid, err := a.ca.VerifyClient(cert, now)
	if err != nil {
		return store.Soul{}, &store.JoinRefusedError{Reason: "join.cert_invalid", Detail: "the client certificate does not verify against the keeper CA: " + err.Error()}
	}
	so, err := souls.SoulGet(ctx, sid)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return store.Soul{}, &store.JoinRefusedError{Reason: store.JoinSoulNotFound, SID: sid, Detail: "no such soul"}
	case err != nil:
		return store.Soul{}, err
	case so.Status == store.SoulDestroyed:
		return store.Soul{}, &store.JoinRefusedError{Reason: store.JoinSoulDestroyed, SID: sid, Detail: "the soul is destroyed"}
	case so.CertSerial == "" || so.CertSerial != pki.SerialHex(cert):
		return store.Soul{}, &store.JoinRefusedError{Reason: store.JoinCertRevoked, SID: sid, Detail: "the presented certificate is not the soul's current one"}
	}
	return so, nil
}
