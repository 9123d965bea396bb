package sshtest_test

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/sshtest"
)

func TestStartStopRestart(t *testing.T) {
	t.Parallel()
	s := sshtest.Start(t, sshtest.Options{})
	if !strings.HasPrefix(banner(t, s.HostPort()), "SSH-2.0-OpenSSH") {
		t.Fatal("no OpenSSH banner")
	}
	if !strings.HasPrefix(s.HostKey, "ssh-ed25519 ") {
		t.Errorf("host key %q", s.HostKey)
	}
	s.Stop()
	s.Stop() // idempotent
	if c, err := net.DialTimeout("tcp", s.HostPort(), time.Second); err == nil {
		c.Close()
		t.Fatal("still listening after Stop")
	}

	same := sshtest.Start(t, sshtest.Options{Port: s.Port, HostKey: s.HostPrivateKey, ClientKey: s.ClientKey})
	if same.HostKey != s.HostKey || same.HostPort() != s.HostPort() {
		t.Errorf("restart changed identity: %s %q", same.HostPort(), same.HostKey)
	}
}

func TestStartN(t *testing.T) {
	t.Parallel()
	servers := sshtest.StartN(t, 5, sshtest.Options{})
	ports := map[int]bool{}
	keys := map[string]bool{}
	for _, s := range servers {
		ports[s.Port] = true
		keys[s.HostKey] = true
		if string(s.ClientKey) != string(servers[0].ClientKey) {
			t.Error("servers authorize different client keys")
		}
		banner(t, s.HostPort())
	}
	if len(ports) != 5 || len(keys) != 5 {
		t.Errorf("%d ports and %d host keys for 5 servers", len(ports), len(keys))
	}
}

func banner(t *testing.T, addr string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return line
}
