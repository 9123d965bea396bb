package docker_test

import (
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/module"
	"github.com/soulstack/soulstack/internal/modules/docker"
	"github.com/soulstack/soulstack/internal/modules/moduletest"
)

// TestDistroEngineInVM installs Debian's Docker engine for real in a local
// VM booted from the driver's debian-bookworm base (no docker CLI, no
// engine) with nesting: docker, the profile key that lets a container
// engine run there. The first run installs docker.io through apt, starts
// dockerd detached with the flags the VM needs (vfs storage on the
// overlay root, no iptables where the filter table cannot be listed),
// makes the docker group and adds the connecting user. verify:
// hello-world, as the seed's `docker run hello-world`: with pull: never
// and no image it fails docker.verify_failed; with the default pull:
// missing and no registry answering it fails docker.pull_failed; with a
// registry on the host (Debian's docker-registry, holding the test's own
// hello-world image) as the engine's registry mirror it pulls
// hello-world, unchanged in the scenario, and runs it; a second run finds
// the image and changes nothing, in one round trip. A named user is
// added; a stopped engine is started again.
func TestDistroEngineInVM(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat(registryBin); err != nil {
		t.Skipf("the pull through a registry mirror needs %s (apt-get install docker-registry)", registryBin)
	}
	layer := helloLayer(t)
	port := freePort(t)
	tg := moduletest.NewVMWith(t, moduletest.VMOptions{SSHUser: "deploy", Suffix: "docker.test", Base: "debian-bookworm", Nesting: "docker",
		HostPorts: []uint16{port}})
	if tg.Attributes["nesting"] != "docker" {
		t.Errorf("VM attributes %v, want nesting docker", tg.Attributes)
	}
	if got := tg.Sh(t, "command -v docker dockerd || echo none"); got != "none" {
		t.Fatalf("the base VM has Docker before the run: %q", got)
	}
	// Docker Hub's names are the VM's loopback, from before dockerd
	// starts: a pull that falls back from the mirror to Docker Hub ends
	// there, not at a DNS server.
	tg.Sh(t, `for h in registry-1.docker.io index.docker.io auth.docker.io production.cloudflare.docker.com; do echo "127.0.0.1 $h" >>/etc/hosts; done`)
	inGroup := func(user string) bool {
		return slices.Contains(strings.Fields(tg.Sh(t, "id -nG "+user)), "docker")
	}
	output := func(res module.Result) map[string]any {
		out, _ := res.Output.(map[string]any)
		return out
	}
	base := map[string]any{"source": "distro", "compose": false}
	with := func(kv ...any) map[string]any {
		p := map[string]any{}
		for k, v := range base {
			p[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			p[kv[i].(string)] = kv[i+1]
		}
		return p
	}

	start := time.Now()
	res, n, err := run(t, tg, with("verify", "daemon"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("fresh install of docker.io: %v", time.Since(start).Round(time.Millisecond))
	out := output(res)
	if !res.Changed || n != 1 || out["status"] != "ok" || !strings.HasPrefix(out["docker_version"].(string), "Docker version ") ||
		!slices.Equal(out["users_added"].([]string), []string{"deploy"}) ||
		!strings.HasPrefix(out["started_with"].(string), "dockerd --storage-driver=vfs") {
		t.Fatalf("fresh install: %+v in %d round trips", res, n)
	}
	if !inGroup("deploy") {
		t.Fatal("deploy is not in the docker group")
	}
	if got := tg.Sh(t, "docker info --format '{{.Driver}}' && test -s /run/docker.pid && echo pidfile"); got != "vfs\npidfile" {
		t.Fatalf("docker info after the install: %q", got)
	}

	// hello-world with no image on the soul and pull: never: nothing is
	// pulled, the step says what to do.
	_, _, err = run(t, tg, with("pull", "never"))
	if module.Code(err) != docker.CodeVerifyFailed || !strings.Contains(err.Error(), "pull is never") {
		t.Fatalf("verify hello-world without an image, pull never: %v (code %s)", err, module.Code(err))
	}
	// The engine's registry mirror is the host's address on the VM's
	// bridge; dockerd reloads registry-mirrors on SIGHUP.
	gw := tg.Sh(t, "getent hosts soulstack-local-gateway | cut -d' ' -f1")
	mirror := fmt.Sprintf("http://%s:%d", gw, port)
	tg.Sh(t, fmt.Sprintf(`printf '{"registry-mirrors": ["%s"]}\n' >/etc/docker/daemon.json && kill -HUP "$(cat /run/docker.pid)"
for i in $(seq 50); do docker info --format '{{.RegistryConfig.Mirrors}}' | grep -qF '%s' && exit 0; sleep 0.2; done; exit 1`, mirror, mirror))

	// The default pulls a missing image; with no registry answering (the
	// mirror not started yet, Docker Hub out of reach) it fails
	// docker.pull_failed, not docker.verify_failed.
	_, _, err = run(t, tg, with())
	if module.Code(err) != docker.CodePullFailed || !strings.Contains(err.Error(), "docker pull hello-world failed") {
		t.Fatalf("verify hello-world, image missing, no registry: %v (code %s), want %s", err, module.Code(err), docker.CodePullFailed)
	}
	if got := tg.Sh(t, "docker image ls -q hello-world | wc -l"); got != "0" {
		t.Fatalf("a failed pull left %s hello-world images", got)
	}

	// The registry answers, holding hello-world: the pull goes through
	// the mirror, hello-world runs, and the run reports the pull.
	reg := startRegistry(t, net.JoinHostPort(gw, fmt.Sprint(port)))
	pushImage(t, reg, "library/hello-world", "latest", layer, []string{"/hello"})
	res, n, err = run(t, tg, with())
	if err != nil {
		t.Fatal(err)
	}
	if out := output(res); !res.Changed || n != 1 || out["pulled"] != true || out["started_with"] != "" {
		t.Fatalf("verify hello-world through the mirror: %+v in %d round trips, want changed, pulled, in 1", res, n)
	}
	if got := tg.Sh(t, "docker image ls --format '{{.Repository}}:{{.Tag}}' hello-world"); got != "hello-world:latest" {
		t.Fatalf("images after the pull: %q", got)
	}
	// The image is there now: nothing changes, with either pull.
	for _, p := range []map[string]any{with(), with("pull", "never")} {
		res, n, err = run(t, tg, p)
		if err != nil {
			t.Fatal(err)
		}
		if out := output(res); res.Changed || n != 1 || out["status"] != "already_installed" || out["started_with"] != "" || out["pulled"] != false {
			t.Fatalf("verify hello-world %v: %+v in %d round trips, want unchanged already_installed in 1", p, res, n)
		}
	}
	if got := tg.Sh(t, "docker ps -aq | wc -l"); got != "0" {
		t.Errorf("hello-world left %s containers (want --rm)", got)
	}

	tg.Sh(t, "useradd -m alice")
	res, _, err = run(t, tg, with("users", []any{"alice", "deploy"}, "verify", "daemon"))
	if err != nil || !res.Changed || !slices.Equal(output(res)["users_added"].([]string), []string{"alice"}) || !inGroup("alice") {
		t.Fatalf("add alice: %+v, %v", res, err)
	}

	// A stopped engine is started again, with verify daemon too, even
	// when a stale pid file (a dockerd that died, a host restart) is left.
	tg.ShFor(t, `pid=$(cat /run/docker.pid) && kill "$pid" && while kill -0 "$pid" 2>/dev/null; do sleep 0.2; done
! docker info >/dev/null 2>&1 && echo 999999 >/run/docker.pid`, 3*time.Minute)
	res, _, err = run(t, tg, with("verify", "daemon"))
	if err != nil || !res.Changed || !strings.Contains(output(res)["started_with"].(string), "dockerd") {
		t.Fatalf("restart a stopped engine: %+v, %v", res, err)
	}
}

// TestEngineWithoutNestingInVM: on a local VM without nesting: docker the
// kernel refuses dockerd what it needs; the step fails
// docker.nesting_required and says what to change, not only the kernel's
// message.
func TestEngineWithoutNestingInVM(t *testing.T) {
	t.Parallel()
	tg := moduletest.NewVMWith(t, moduletest.VMOptions{SSHUser: "root", Suffix: "docker.test", Base: "debian-bookworm"})
	_, _, err := run(t, tg, map[string]any{"source": "distro", "compose": false, "verify": "daemon"})
	if module.Code(err) != docker.CodeNestingRequired || !strings.Contains(err.Error(), "nesting: docker") || !strings.Contains(err.Error(), "allow_nesting: true") {
		t.Fatalf("docker on a VM without nesting: %v (code %s), want %s naming nesting: docker and allow_nesting", err, module.Code(err), docker.CodeNestingRequired)
	}
}
