package keeper_test

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/keepertest"
)

// TestServeSpeaksSystemdNotify: under a Type=notify unit (NOTIFY_SOCKET
// set, as systemd does) the keeper says READY=1 only once it accepts
// requests; SIGHUP reloads keeper.yml, applying log.level (debug lines
// appear) and naming the keys that need a restart, between RELOADING=1
// and READY=1; a keeper.yml that no longer loads keeps the running
// configuration; SIGTERM says STOPPING=1 before the drain.
func TestServeSpeaksSystemdNotify(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sock := filepath.Join(dir, "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	msgs := make(chan string, 16)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, _, err := conn.ReadFromUnix(buf)
			if err != nil {
				return
			}
			msgs <- string(buf[:n])
		}
	}()
	next := func(want string) {
		t.Helper()
		select {
		case m := <-msgs:
			if !strings.HasPrefix(m, want) {
				t.Fatalf("notify message %q, want %s", m, want)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("no %s from the keeper", want)
		}
	}
	cfg := filepath.Join(dir, "keeper.yml")
	write := func(s string) {
		if err := os.WriteFile(cfg, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("log: {level: info}\ndrain_timeout: 10s\n")
	cmd := exec.Command(keeperBin, "serve", "--listen", "127.0.0.1:0", "--config", cfg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+sock)
	k := keepertest.Run(t, cmd)
	next("READY=1")

	hupAndWait := func(logWant string) string {
		t.Helper()
		if err := k.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		next("RELOADING=1")
		next("READY=1")
		deadline := time.After(10 * time.Second)
		var seen strings.Builder
		for {
			select {
			case l := <-k.Logs():
				seen.WriteString(l + "\n")
				if strings.Contains(l, logWant) {
					return seen.String()
				}
			case <-deadline:
				t.Fatalf("no log line %q after SIGHUP:\n%s", logWant, seen.String())
			}
		}
	}
	write("log: {level: debug}\ndrain_timeout: 20s\n")
	hupAndWait("reload: log level changed")
	hupAndWait("keys=drain_timeout")
	// The new level holds: a request now logs at debug.
	if _, err := adminClient(t, k, filepath.Join(dir, ".keeper")).TokenList(t.Context(), client.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	waitLog(t, k, "level=DEBUG", "msg=request")
	write("log: {level: loud}\n")
	hupAndWait("reload: the configuration does not load; the running one stays")

	if err := k.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	next("STOPPING=1")
	select {
	case <-k.Done():
	case <-time.After(60 * time.Second):
		t.Fatal("the keeper did not stop")
	}
}
