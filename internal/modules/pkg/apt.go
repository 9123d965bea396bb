package pkg

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/soulstack/soulstack/internal/module"
	"github.com/soulstack/soulstack/internal/modules/command"
	"github.com/soulstack/soulstack/internal/probe"
)

// apt is the manager of Debian and Ubuntu souls: dpkg-query to look,
// apt-get to change.
type apt struct{}

var _ manager = apt{}

// lockedExit is the exit status of the apt scripts when a lock holder
// stopped them; aptCommon spells it out.
const lockedExit = 75

// aptCommon are the shell functions the change scripts share:
//
//	holders     prints an @locked line for every process that has a dpkg
//	            or apt lock file open, or runs unattended-upgrade
//	apt_run     runs apt-get with its output in $log (copied to stderr),
//	            and exits lockedExit when it failed on a lock
//	states      prints the @pkg records of its arguments
//
// Lock files are only looked at, never removed.
const aptCommon = `export LC_ALL=C DEBIAN_FRONTEND=noninteractive
log=$(mktemp) || exit 1
trap 'rm -f "$log"' EXIT
holders() {
	find /proc/[0-9]*/fd -maxdepth 1 \( -lname /var/lib/dpkg/lock-frontend -o -lname /var/lib/dpkg/lock \
		-o -lname /var/cache/apt/archives/lock -o -lname /var/lib/apt/lists/lock \) -printf '%h %l\n' 2>/dev/null |
	while read -r fd file; do
		pid=${fd#/proc/}; pid=${pid%/fd}
		[ "$pid" = "$$" ] && continue
		printf '@locked\t%s\t%s\t%s\t%s\n' "$pid" "$(cat /proc/$pid/comm 2>/dev/null)" "$file" \
			"$(tr '\0' ' ' 2>/dev/null </proc/$pid/cmdline | cut -c1-200)"
	done
	for c in $(grep -las unattended-upgrade /proc/[0-9]*/cmdline 2>/dev/null); do
		tr '\0' '\n' 2>/dev/null <"$c" | head -n 2 | grep -qx '\(.*/\)\{0,1\}unattended-upgrade' || continue
		pid=${c#/proc/}; pid=${pid%/cmdline}
		printf '@locked\t%s\t%s\t\t%s\n' "$pid" "$(cat /proc/$pid/comm 2>/dev/null)" \
			"$(tr '\0' ' ' 2>/dev/null <"$c" | cut -c1-200)"
	done
}
check_locks() {
	h=$(holders)
	if [ -n "$h" ]; then
		printf '%s\n' "$h"
		exit 75
	fi
}
apt_run() {
	"$@" </dev/null >"$log" 2>&1
	rc=$?
	cat "$log" >&2
	if [ $rc -ne 0 ] && grep -q -e 'Could not get lock' -e 'Unable to acquire the dpkg frontend lock' -e 'Unable to lock' "$log"; then
		h=$(holders)
		if [ -n "$h" ]; then
			printf '%s\n' "$h"
		else
			printf '@locked\t\t\t\t%s\n' "$(grep -m 1 -e 'Could not get lock' -e 'Unable to' "$log")"
		fi
		exit 75
	fi
	return $rc
}
errors_of() {
	grep -e '^E:' -e '^dpkg: error' "$log" | tail -n 3 | tr '\n\t' '  '
}
states() {
	dpkg-query -W -f='@pkg\t${Package}\t${Architecture}\t${Status}\t${Version}\n' -- "$@" 2>/dev/null
}
APT_OPTS='-y -q -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold'
`

// aptLookup is the shell function that decides which packages apt has a
// candidate for, in the package lists as they are: install and check use
// the same one. $cache_opts are apt-cache's options (a check keeps the
// caches apt-cache would write in memory).
const aptLookup = `# lookup sets ok (the packages apt has a candidate for), names (their names
# without versions) and unknown (the others).
lookup() {
	ok= names= unknown=
	for p in "$@"; do
		case $p in
		*=*) c=$(apt-cache $cache_opts show --no-all-versions "$p" 2>/dev/null | grep -m 1 '^Version:') ;;
		*) c=$(apt-cache $cache_opts policy "$p" 2>/dev/null | sed -n 's/^ *Candidate: //p' | head -n 1)
		   [ "$c" = '(none)' ] && c= ;;
		esac
		if [ -n "$c" ]; then
			ok="$ok $p"
			names="$names ${p%%=*}"
		else
			unknown="$unknown $p"
		fi
	done
}
`

// aptCandidatesScript prints "@cand <package>" for every package given
// that apt has a candidate for in the lists as they are, and changes
// nothing (a check's probe).
const aptCandidatesScript = `export LC_ALL=C
cache_opts='-o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache='
` + aptLookup + `lookup "$@"
for p in $ok; do printf '@cand\t%s\n' "$p"; done
exit 0
`

// aptInstallScript installs the packages given as the arguments after the
// first (name[:arch][=version]) that apt has a candidate for. $1 is the
// refresh (see refresh): 1 runs apt-get update first; 2 runs it once, and
// looks again, when a package has no candidate. Besides the lines of
// aptCommon it prints
//
//	@updated                        the lists were refreshed
//	@update_failed <errors>         apt-get update (1) failed; nothing else ran
//	@retry_update_failed <errors>   apt-get update (2) failed; the rest ran
//	                                on the lists as they are after it
//	@unknown <package>              apt has no candidate for the package
//	@failed <package> <errors>      the package alone failed to install
const aptInstallScript = aptCommon + "cache_opts=\n" + aptLookup + `refresh=$1
shift
check_locks
update() {
	apt_run apt-get update -q || return 1
	mkdir -p /var/lib/apt/periodic && touch /var/lib/apt/periodic/update-success-stamp
	echo '@updated'
}
if [ "$refresh" = 1 ] && ! update; then
	printf '@update_failed\t%s\n' "$(errors_of)"
	exit 0
fi
lookup "$@"
if [ -n "$unknown" ] && [ "$refresh" = 2 ]; then
	# A failed update may still have refreshed the other sources' lists:
	# look again either way.
	update || printf '@retry_update_failed\t%s\n' "$(errors_of)"
	lookup "$@"
fi
# The names are checked Debian package names: word splitting is safe.
for p in $unknown; do
	printf '@unknown\t%s\n' "$p"
done
[ -n "$ok" ] || exit 0
if ! apt_run apt-get install $APT_OPTS $ok; then
	# One bad package must not keep the others out: install each alone.
	for p in $ok; do
		apt_run apt-get install $APT_OPTS "$p" || printf '@failed\t%s\t%s\n' "$p" "$(errors_of)"
	done
fi
states $names
exit 0
`

// aptRemoveScript removes (purges when $1 is 1) the packages given as the
// other arguments (name[:arch]); it prints the lines of aptCommon and
// @failed like aptInstallScript.
const aptRemoveScript = aptCommon + `action=remove
[ "$1" = 1 ] && action=purge
shift
check_locks
if ! apt_run apt-get $action $APT_OPTS "$@"; then
	for p in "$@"; do
		apt_run apt-get $action $APT_OPTS "$p" || printf '@failed\t%s\t%s\n' "$p" "$(errors_of)"
	done
fi
states "$@"
exit 0
`

func (apt) candidates(ctx context.Context, t module.Target, pkgs []spec) ([]string, error) {
	args := []string{"/bin/sh", "-c", aptCandidatesScript, "sh"}
	for _, s := range pkgs {
		args = append(args, s.raw)
	}
	res, err := t.Exec(ctx, module.Command{Argv: args, ReadOnly: true})
	if err != nil {
		return nil, err
	}
	if res.ExitCode != 0 {
		return nil, &module.Error{Code: CodeProtocol, Message: fmt.Sprintf("look up candidates: exit status %d: %s", res.ExitCode, command.Tail(res.Stderr, res.Stdout))}
	}
	var out []string
	for _, f := range lines(res.Stdout) {
		if f[0] == "@cand" && len(f) == 2 {
			out = append(out, f[1])
		}
	}
	return out, nil
}

func (apt) query(ctx context.Context, t module.Target, pkgs []spec) (snapshot, error) {
	patterns := make([]string, len(pkgs))
	for i, s := range pkgs {
		patterns[i] = s.query()
	}
	argv, req := probe.Command(probe.KindAptQuery, patterns...)
	res, err := t.Exec(ctx, module.Command{Argv: argv, Probe: req, ReadOnly: true})
	if err != nil {
		return snapshot{}, err
	}
	if res.ExitCode != 0 {
		return snapshot{}, &module.Error{Code: CodeProtocol, Message: fmt.Sprintf("query dpkg: exit status %d: %s", res.ExitCode, command.Tail(res.Stderr, res.Stdout))}
	}
	var snap snapshot
	var sawLists bool
	for _, f := range lines(res.Stdout) {
		switch f[0] {
		case "@nomanager":
			return snapshot{}, &module.Error{Code: CodeUnsupported, Message: "the soul has no apt-get and dpkg-query: core.pkg supports Debian and Ubuntu (apt) souls in this build"}
		case "@lists":
			if len(f) < 4 {
				continue
			}
			now, err1 := strconv.ParseInt(f[1], 10, 64)
			stamp, err2 := strconv.ParseInt(f[2], 10, 64)
			n, err3 := strconv.Atoi(f[3])
			if err1 != nil || err2 != nil || err3 != nil {
				return snapshot{}, &module.Error{Code: CodeProtocol, Message: fmt.Sprintf("query dpkg: unreadable lists line %q", strings.Join(f, " "))}
			}
			sawLists = true
			snap.hasLists = n > 0 && stamp > 0
			snap.listsAge = time.Duration(now-stamp) * time.Second
		case "@pkg":
			if r, ok := parseRecord(f); ok {
				snap.states = append(snap.states, r)
			}
		}
	}
	if !sawLists {
		return snapshot{}, &module.Error{Code: CodeProtocol, Message: "query dpkg: no answer: " + command.Tail(res.Stderr, res.Stdout)}
	}
	return snap, nil
}

func (apt) install(ctx context.Context, t module.Target, pkgs []spec, refresh refresh) (outcome, error) {
	args := []string{"/bin/sh", "-c", aptInstallScript, "sh", strconv.Itoa(int(refresh))}
	for _, s := range pkgs {
		args = append(args, s.raw)
	}
	return runChange(ctx, t, "apt-get install", args)
}

func (apt) remove(ctx context.Context, t module.Target, pkgs []spec, purge bool) (outcome, error) {
	flag := "0"
	if purge {
		flag = "1"
	}
	args := []string{"/bin/sh", "-c", aptRemoveScript, "sh", flag}
	for _, s := range pkgs {
		args = append(args, s.query())
	}
	return runChange(ctx, t, "apt-get remove", args)
}

// runChange runs an install or remove script and reads its lines.
func runChange(ctx context.Context, t module.Target, what string, argv []string) (outcome, error) {
	res, err := t.Exec(ctx, module.Command{Argv: argv})
	if err != nil {
		return outcome{}, err
	}
	out := outcome{failed: map[string]string{}}
	var le lockedError
	for _, f := range lines(res.Stdout) {
		switch f[0] {
		case "@updated":
			out.updated = true
		case "@update_failed":
			return out, &module.Error{Code: CodeUpdateFailed, Message: "apt-get update failed: " + orTail(field(f, 1), res)}
		case "@retry_update_failed":
			out.retryUpdateFailed = orTail(field(f, 1), res)
		case "@unknown":
			out.notFound = append(out.notFound, field(f, 1))
		case "@failed":
			out.failed[field(f, 1)] = strings.TrimSpace(field(f, 2))
		case "@pkg":
			if r, ok := parseRecord(f); ok {
				out.states = append(out.states, r)
			}
		case "@locked":
			le.holders = append(le.holders, holder{pid: field(f, 1), comm: field(f, 2), file: field(f, 3), cmdline: field(f, 4)})
		}
	}
	switch res.ExitCode {
	case 0:
		return out, nil
	case lockedExit:
		return out, &le
	}
	return out, &module.Error{Code: module.CodeFailed, Message: fmt.Sprintf("%s: exit status %d: %s", what, res.ExitCode, command.Tail(res.Stderr, res.Stdout))}
}

func orTail(s string, res module.ExecResult) string {
	if strings.TrimSpace(s) != "" {
		return strings.TrimSpace(s)
	}
	return command.Tail(res.Stderr, res.Stdout)
}

// lines splits a script's output into the tab-separated fields of its
// tagged lines; other lines are dropped.
func lines(b []byte) [][]string {
	var out [][]string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "@") {
			out = append(out, strings.Split(l, "\t"))
		}
	}
	return out
}

func field(f []string, i int) string {
	if i < len(f) {
		return f[i]
	}
	return ""
}

// parseRecord reads an @pkg line: name, arch, status, version.
func parseRecord(f []string) (record, bool) {
	if len(f) < 5 || f[1] == "" {
		return record{}, false
	}
	return record{name: f[1], arch: f[2], status: f[3], version: f[4]}, true
}
