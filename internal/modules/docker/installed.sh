# core.docker.installed, run as root with /bin/sh on the soul in one round
# trip. Arguments: compose (true|false), source (docker|distro), verify
# (hello-world|daemon), pull (missing|never), mode (apply|check), then the
# users to add to the docker group (none:
# the connecting user, SUDO_USER under sudo, unless it is root). The last
# line of standard output is a JSON report; errors go to standard error
# with exit status 10 (install failed), 11 (verify failed), 12 (a user
# does not exist), 13 (the host cannot run a container engine), 14 (the
# hello-world image could not be pulled) or 1 (anything else). In check
# mode nothing is changed: each change the apply would make is printed as
# a line "@change <kind> <action> <name>" before the report.
set -u
umask 022
cd /
compose=$1 source=$2 verify=$3 pull=$4 mode=$5
shift 5
export DEBIAN_FRONTEND=noninteractive
tmp=$(mktemp -d) || exit 1
trap 'rm -rf -- "$tmp"' EXIT

no_image='no hello-world:latest image on the soul, and pull is never: load it first (docker load, or docker import), or use pull: missing or verify: daemon'
changed=false installed=false daemon_started=false users_added= started= pulled=false

# would KIND ACTION NAME records, in check mode, a change the apply would
# make.
would() {
	printf '@change\t%s\t%s\t%s\n' "$1" "$2" "$3"
	changed=true
}

fail() {
	code=$1
	shift
	printf '%s\n' "$*" >&2
	exit "$code"
}

apt_get() {
	apt-get -q -y -o DPkg::Lock::Timeout=300 "$@" >>"$tmp/apt.log" 2>&1
}

apt_install() {
	apt_get install "$@" || fail 10 "apt-get install $*: $(tail -n 5 "$tmp/apt.log")"
}

# has_candidate PACKAGE reports whether apt can install PACKAGE.
has_candidate() {
	c=$(apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ {print $2}')
	[ -n "$c" ] && [ "$c" != "(none)" ]
}

compose_ok() {
	docker compose version >/dev/null 2>&1 || docker-compose --version >/dev/null 2>&1
}

daemon_ok() {
	timeout 30 docker info >/dev/null 2>"$tmp/info"
}

# engine_present reports whether Docker is installed: the CLI works and
# the engine (dockerd) is there. A lone CLI is not Docker installed.
engine_present() {
	docker --version >/dev/null 2>&1 && command -v dockerd >/dev/null 2>&1
}

# dockerd_flags prints the flags a detached dockerd needs on this host,
# found by probing: vfs storage when /var/lib/docker is on overlayfs
# (overlay2 cannot stack on it), no iptables rules when iptables cannot
# list the filter table (no netfilter for this kernel or sandbox).
dockerd_flags() {
	mkdir -p /var/lib/docker
	[ "$(stat -f -c %T /var/lib/docker 2>/dev/null)" = overlayfs ] && printf ' --storage-driver=vfs'
	iptables -w 5 -t filter -n -L >/dev/null 2>&1 || printf ' --iptables=false'
}

# start_daemon starts the engine through systemd when it is PID 1, the
# init script under SysV init, or else dockerd detached in its own session
# (pid file /run/docker.pid, log /var/log/dockerd.log; nothing restarts
# it); it fails when there is no engine. $started says how it started.
start_daemon() {
	if [ -d /run/systemd/system ] && systemctl cat docker.service >/dev/null 2>&1; then
		started="systemctl enable --now docker.service"
		systemctl enable --now docker.service >"$tmp/start" 2>&1 || return 1
	elif [ -x /etc/init.d/docker ] && [ "$(cat /proc/1/comm 2>/dev/null)" = init ]; then
		started="/etc/init.d/docker start"
		/etc/init.d/docker start >"$tmp/start" 2>&1 || return 1
	elif command -v dockerd >/dev/null 2>&1; then
		# A pid file of a dockerd that is gone (killed, or the host
		# restarted) would stop a new one; a live one is left alone.
		if [ -f /run/docker.pid ]; then
			pid=$(cat /run/docker.pid 2>/dev/null)
			if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
				printf 'dockerd (pid %s, /run/docker.pid) runs but does not answer docker info\n' "$pid" >"$tmp/start"
				return 1
			fi
			rm -f /run/docker.pid
		fi
		flags=$(dockerd_flags)
		started="dockerd$flags (detached; pid file /run/docker.pid, log /var/log/dockerd.log)"
		# shellcheck disable=SC2086
		setsid dockerd --pidfile /run/docker.pid $flags >>/var/log/dockerd.log 2>&1 </dev/null &
	else
		printf 'no Docker engine (dockerd) is installed\n' >"$tmp/start"
		return 1
	fi
	i=0
	while [ "$i" -lt 60 ]; do
		daemon_ok && return 0
		sleep 0.5
		i=$((i + 1))
	done
	tail -n 3 /var/log/dockerd.log >>"$tmp/start" 2>/dev/null
	return 1
}

# install_docker installs the engine from Docker's apt repository or the
# distribution's packages.
install_docker() {
	apt_get update || true
	if [ "$source" = distro ]; then
		pkgs=docker.io
		if [ "$compose" = true ]; then
			if has_candidate docker-compose-v2; then pkgs="$pkgs docker-compose-v2"; else pkgs="$pkgs docker-compose"; fi
		fi
	else
		# shellcheck disable=SC1091
		. /etc/os-release
		case "$ID ${ID_LIKE:-}" in
		ubuntu* | *" ubuntu"*) dist=ubuntu codename=${UBUNTU_CODENAME:-${VERSION_CODENAME:-}} ;;
		debian* | *" debian"*) dist=debian codename=${VERSION_CODENAME:-} ;;
		*) fail 10 "source docker supports Debian and Ubuntu, not $ID; use source distro" ;;
		esac
		[ -n "$codename" ] || fail 10 "no release codename in /etc/os-release"
		command -v curl >/dev/null 2>&1 || apt_install ca-certificates curl
		install -d -m 0755 /etc/apt/keyrings
		curl -fsSL --connect-timeout 20 --max-time 120 -o /etc/apt/keyrings/docker.asc.new "https://download.docker.com/linux/$dist/gpg" ||
			fail 10 "download Docker's apt repository key from download.docker.com failed"
		chmod 0644 /etc/apt/keyrings/docker.asc.new && mv /etc/apt/keyrings/docker.asc.new /etc/apt/keyrings/docker.asc
		printf 'deb [arch=%s signed-by=/etc/apt/keyrings/docker.asc] https://download.docker.com/linux/%s %s stable\n' \
			"$(dpkg --print-architecture)" "$dist" "$codename" >/etc/apt/sources.list.d/docker.list
		apt_get update || fail 10 "apt-get update with Docker's repository: $(tail -n 5 "$tmp/apt.log")"
		pkgs="docker-ce docker-ce-cli containerd.io"
		[ "$compose" = true ] && pkgs="$pkgs docker-compose-plugin"
	fi
	# shellcheck disable=SC2086
	apt_install $pkgs
}

if [ $# -eq 0 ]; then
	u=${SUDO_USER:-$(id -un)}
	[ "$u" = root ] || set -- "$u"
fi
for u in "$@"; do
	id -u "$u" >/dev/null 2>&1 || fail 12 "user $u does not exist"
done

if ! engine_present && [ "$mode" = check ]; then
	would package install "docker ($source)"
	installed=true
elif ! engine_present; then
	install_docker
	installed=true changed=true
	docker --version >/dev/null 2>&1 || fail 10 "docker --version fails after the install"
	command -v dockerd >/dev/null 2>&1 || fail 10 "no Docker engine (dockerd) after the install"
fi

if [ $# -gt 0 ]; then
	if ! getent group docker >/dev/null; then
		if [ "$mode" = check ]; then
			would group create docker
		else
			groupadd --system docker || fail 1 "groupadd docker failed"
			changed=true
		fi
	fi
	for u in "$@"; do
		if ! id -nG "$u" | tr ' ' '\n' | grep -qx docker; then
			[ "$mode" = check ] && { would user add "$u (group docker)"; continue; }
			usermod -aG docker "$u" || fail 1 "usermod -aG docker $u failed"
			users_added="$users_added${users_added:+,}\"$u\""
			changed=true
		fi
	done
fi

# Every run verifies: the engine must answer docker info (started when it
# does not), and with verify hello-world the hello-world image must run
# and greet. A check asks the same questions and stops there.
if [ "$mode" = check ]; then
	if [ "$installed" = true ] || ! daemon_ok; then
		would service start docker
	elif [ "$verify" = hello-world ] && ! docker image inspect hello-world:latest >/dev/null 2>&1; then
		[ "$pull" = never ] &&
			fail 11 "$no_image"
		would image pull hello-world:latest
	fi
	printf '{"changed":%s}\n' "$changed"
	exit 0
fi
if ! daemon_ok; then
	if ! start_daemon; then
		# A host that may not make network namespaces, bridges or
		# iptables rules for containers (a local VM without nesting, an
		# unprivileged container) refuses the engine with EPERM.
		if grep -qiE 'operation not permitted|permission denied' "$tmp/start" /var/log/dockerd.log 2>/dev/null &&
			grep -qiE 'network controller|iptables|netns|namespace|cgroup|overlay' "$tmp/start" /var/log/dockerd.log 2>/dev/null; then
			fail 13 "this host cannot run a container engine: the kernel refused what dockerd needs ($(grep -ihE 'operation not permitted|permission denied' "$tmp/start" /var/log/dockerd.log 2>/dev/null | tail -n 1 | cut -c1-200)); on a local VM use a profile with nesting: docker on a provider whose config says allow_nesting: true"
		fi
		fail 11 "the Docker daemon does not answer docker info: $(tail -n 3 "$tmp/info")$(tail -n 3 "$tmp/start" 2>/dev/null | sed 's/^/; start: /')"
	fi
	daemon_started=true changed=true
fi
if [ "$verify" = hello-world ]; then
	# The image is pulled when it is missing (from the engine's registry or
	# its mirrors), unless pull is never: offline sites load it themselves.
	if ! docker image inspect hello-world:latest >/dev/null 2>&1; then
		[ "$pull" = never ] &&
			fail 11 "$no_image"
		timeout 300 docker pull hello-world:latest >"$tmp/pull" 2>&1 ||
			fail 14 "docker pull hello-world failed (no registry or mirror answered; an offline site loads the image and says pull: never): $(tail -n 3 "$tmp/pull" | tr '\n' ' ')"
		pulled=true changed=true
	fi
	timeout 300 docker run --rm --pull never hello-world >"$tmp/hello" 2>&1 ||
		fail 11 "docker run --rm --pull never hello-world failed: $(tail -n 5 "$tmp/hello")"
	grep -q 'Hello from Docker!' "$tmp/hello" ||
		fail 11 "docker run --rm --pull never hello-world printed no 'Hello from Docker!': $(head -c 300 "$tmp/hello")"
fi

version=$(docker --version 2>/dev/null | tr -d '"\\')
has_compose=false
compose_ok && has_compose=true
started=$(printf '%s' "$started" | tr -d '"\\')
printf '{"changed":%s,"installed":%s,"daemon_started":%s,"compose":%s,"users_added":[%s],"docker_version":"%s","started_with":"%s","pulled":%s}\n' \
	"$changed" "$installed" "$daemon_started" "$has_compose" "$users_added" "$version" "$started" "$pulled"
