# core.postgres.installed, run as root with /bin/sh on the soul in one round
# trip. Arguments: pg_version (empty: the distribution's), db_name, db_user,
# listen_addresses, allow_remote (true|false), remote_cidr, the extra
# users' names separated by spaces, and the extra databases as name:owner
# pairs separated by spaces (every name a lower-case SQL identifier, checked
# on the keeper). Standard input is two lines per user, db_user first and
# then the extra users in order: the password, then its SCRAM-SHA-256
# verifier (empty when the keeper could not make one). The passwords only
# ever go to files in a private temporary directory (mode 0700, removed on
# exit) and to psql's standard input, never to an argument or an
# environment variable; role statements carry the verifier when there is
# one. The last line of standard output is a JSON report; errors go to
# standard error with exit status 10 (install failed), 11 (verify failed)
# or 1 (anything else). A ninth argument "check" changes nothing: each
# change the apply would make is printed as "@change <kind> <action> <name>
# <before> <after>" (tab-separated), and each existing role as "@role <name>
# <can login> <stored password secret>" for the keeper to compare with the
# password, before a last line {"check":true}.
set -u
umask 077
cd /
want_ver=$1 db=$2 user=$3 listen=$4 remote=$5 cidr=$6 mode=${9:-apply}
users="$user${7:+ $7}"
dbs="$db:$user${8:+ $8}"
export DEBIAN_FRONTEND=noninteractive
tmp=$(mktemp -d) || exit 1
trap 'rm -rf -- "$tmp"' EXIT
# The lists are split on spaces below; no name holds a glob character, and
# globbing stays off anyway.
set -f
for u in $users; do
	IFS= read -r pw || true
	IFS= read -r verifier || true
	printf '%s' "$pw" >"$tmp/pw.$u"
	printf '%s' "$verifier" >"$tmp/verifier.$u"
done
unset pw verifier

changed=false installed=false config_changed=false restarted=false
role_created=false db_created=false password_changed=false

# would KIND ACTION NAME [BEFORE AFTER] records a change a check found.
would() {
	printf '@change\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "${4:-}" "${5:-}"
}
# checked ends a check.
checked() {
	echo '{"check":true}'
	exit 0
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

# add_pgdg adds the PostgreSQL project's apt repository (apt.postgresql.org)
# with its signing key, as its documentation describes, for a version the
# distribution does not carry; it needs the internet, as source: docker
# does. A repository that cannot be reached is not left behind, so the
# soul's own apt-get update keeps working.
add_pgdg() {
	# shellcheck disable=SC1091
	. /etc/os-release
	command -v curl >/dev/null 2>&1 || apt_install ca-certificates curl
	key=/usr/share/postgresql-common/pgdg/apt.postgresql.org.asc
	install -d -m 0755 "$(dirname "$key")"
	curl -fsSL --connect-timeout 20 --max-time 120 -o "$key.new" https://www.postgresql.org/media/keys/ACCC4CF8.asc ||
		fail 10 "postgresql-$ver is not in this distribution's archive, and downloading the key of PostgreSQL's apt repository (apt.postgresql.org) from www.postgresql.org failed: that needs internet access, or use the distribution's version (no pg_version)"
	chmod 0644 "$key.new" && mv "$key.new" "$key"
	printf 'deb [signed-by=%s] https://apt.postgresql.org/pub/repos/apt %s-pgdg main\n' \
		"$key" "${VERSION_CODENAME:?}" >/etc/apt/sources.list.d/pgdg.list
	chmod 0644 /etc/apt/sources.list.d/pgdg.list
	if ! apt_get update; then
		rm -f /etc/apt/sources.list.d/pgdg.list
		fail 10 "postgresql-$ver is not in this distribution's archive, and apt-get update with PostgreSQL's apt repository (apt.postgresql.org) failed: $(tail -n 5 "$tmp/apt.log")"
	fi
}

# newest_server prints the newest major version whose server is installed
# (globbing on for this one pattern).
newest_server() {
	(
		set +f
		for b in /usr/lib/postgresql/*/bin/postgres; do
			[ -x "$b" ] && basename "$(dirname "$(dirname "$b")")"
		done
	) | sort -n | tail -n 1
}

ver=$want_ver
if [ "$mode" = check ]; then
	if [ -n "$ver" ]; then
		{ [ -x "/usr/lib/postgresql/$ver/bin/postgres" ] && command -v psql >/dev/null 2>&1; } ||
			{ would package install "postgresql-$ver"; checked; }
	else
		ver=$(newest_server)
		{ [ -n "$ver" ] && command -v psql >/dev/null 2>&1; } || { would package install postgresql; checked; }
	fi
elif [ -n "$ver" ]; then
	if [ ! -x "/usr/lib/postgresql/$ver/bin/postgres" ] || ! command -v psql >/dev/null 2>&1; then
		apt_get update || true
		has_candidate "postgresql-$ver" || add_pgdg
		has_candidate "postgresql-$ver" || fail 10 "no package postgresql-$ver for this distribution, even from apt.postgresql.org"
		apt_install "postgresql-$ver" "postgresql-client-$ver"
		installed=true
	fi
else
	ver=$(newest_server)
	if [ -z "$ver" ] || ! command -v psql >/dev/null 2>&1; then
		apt_get update || true
		apt_install postgresql postgresql-contrib postgresql-client
		installed=true
		ver=$(newest_server)
		[ -n "$ver" ] || fail 10 "postgresql was installed but no server binary was found under /usr/lib/postgresql"
	fi
fi
command -v pg_lsclusters >/dev/null 2>&1 || fail 10 "pg_lsclusters is missing: postgresql-common is not installed"

cluster() { pg_lsclusters -h 2>/dev/null | awk -v v="$ver" '$1 == v && $2 == "main"'; }
line=$(cluster)
if [ -z "$line" ] && [ "$mode" = check ]; then
	would cluster create "$ver/main"
	checked
fi
if [ -z "$line" ]; then
	pg_createcluster "$ver" main >"$tmp/log" 2>&1 || fail 1 "pg_createcluster $ver main: $(tail -n 5 "$tmp/log")"
	changed=true
	line=$(cluster)
fi
port=$(printf '%s\n' "$line" | awk '{print $3}')
case $(printf '%s\n' "$line" | awk '{print $4}') in
online*) ;;
*)
	[ "$mode" = check ] && { would service start "postgresql $ver/main"; checked; }
	pg_ctlcluster "$ver" main start >"$tmp/log" 2>&1 || fail 1 "pg_ctlcluster $ver main start: $(tail -n 5 "$tmp/log")"
	changed=true
	;;
esac

# pgsql runs psql as the postgres superuser on the cluster; terse errors
# carry no statement text, so a failed statement never echoes a password.
pgsql() {
	runuser -u postgres -- psql --cluster "$ver/main" -X -q -A -t -v ON_ERROR_STOP=1 -v VERBOSITY=terse -d postgres "$@"
}

# password_sql USER prints USER's verifier, or else password, as an SQL
# string literal (standard_conforming_strings is on since PostgreSQL 9.1).
password_sql() {
	if [ -s "$tmp/verifier.$1" ]; then
		printf "'%s'" "$(cat "$tmp/verifier.$1")"
		return
	fi
	printf "'"
	sed "s/'/''/g" "$tmp/pw.$1" | tr -d '\n'
	printf "'"
}

# sql_list prints its arguments as a comma-separated list of SQL string
# literals.
sql_list() {
	sep=
	for a in "$@"; do
		printf "%s'%s'" "$sep" "$a"
		sep=,
	done
}

# has WORD LIST reports whether WORD is one of the space-separated LIST.
has() {
	case " $2 " in
	*" $1 "*) return 0 ;;
	esac
	return 1
}

db_names=
for d in $dbs; do
	db_names="$db_names ${d%%:*}"
done
# shellcheck disable=SC2086 # the names are SQL identifiers, split on purpose
state=$(pgsql -F '|' -c "SELECT (SELECT coalesce(string_agg(rolname, ' '), '') FROM pg_roles WHERE rolname IN ($(sql_list $users))), (SELECT coalesce(string_agg(datname, ' '), '') FROM pg_database WHERE datname IN ($(sql_list $db_names))), current_setting('listen_addresses'), current_setting('hba_file'), split_part(current_setting('server_version'), ' ', 1)" 2>"$tmp/log") ||
	fail 1 "query the cluster's state: $(cat "$tmp/log")"
IFS='|' read -r have_roles have_dbs cur_listen hba pg_version <<EOF
$state
EOF

if [ "$mode" = check ]; then
	for u in $users; do
		has "$u" "$have_roles" || would role create "$u"
	done
	for d in $dbs; do
		has "${d%%:*}" "$have_dbs" || would database create "${d%%:*}"
	done
	# shellcheck disable=SC2086
	pgsql -F '	' -c "SELECT rolname, rolcanlogin, coalesce(rolpassword, '') FROM pg_authid WHERE rolname IN ($(sql_list $users))" 2>"$tmp/log" |
		while IFS='	' read -r name login secret; do
			printf '@role\t%s\t%s\t%s\n' "$name" "$login" "$secret"
		done
fi

# Roles first: every database's owner must exist.
created_roles=
if [ "$mode" != check ]; then
	for u in $users; do
		has "$u" "$have_roles" && continue
		{
			printf 'CREATE ROLE "%s" LOGIN PASSWORD ' "$u"
			password_sql "$u"
			printf ';\n'
		} | pgsql 2>"$tmp/log" || fail 1 "create role $u: $(cat "$tmp/log")"
		created_roles="$created_roles $u"
		changed=true role_created=true
	done
	for d in $dbs; do
		name=${d%%:*} owner=${d#*:}
		has "$name" "$have_dbs" && continue
		pgsql -c "CREATE DATABASE \"$name\" OWNER \"$owner\"" 2>"$tmp/log" || fail 1 "create database $name: $(cat "$tmp/log")"
		changed=true db_created=true
	done
fi

# pg_hba.conf: one managed block, present only when remote access is asked.
begin='# BEGIN soulstack core.postgres.installed'
end='# END soulstack core.postgres.installed'
want_block=
if [ "$remote" = true ]; then
	# One entry per database, for its owner. Quoted names are literal: a
	# database called "all" means only itself.
	want_block=$(
		printf '%s\n' "$begin"
		for d in $dbs; do
			printf 'host\t"%s"\t"%s"\t%s\tscram-sha-256\n' "${d%%:*}" "${d#*:}" "$cidr"
		done
		printf '%s' "$end"
	)
fi
cur_block=$(awk -v b="$begin" -v e="$end" '$0 == b {f = 1} f {print} $0 == e {f = 0}' "$hba")
hba_changed=false
if [ "$mode" = check ]; then
	[ "$cur_block" = "$want_block" ] || would setting update "$hba (remote access)" "$([ -n "$cur_block" ] && echo allowed || echo none)" "$([ -n "$want_block" ] && echo "allowed from $cidr" || echo none)"
	[ "$cur_listen" = "$listen" ] || would setting update listen_addresses "$cur_listen" "$listen (restart)"
	checked
fi
if [ "$cur_block" != "$want_block" ]; then
	awk -v b="$begin" -v e="$end" '$0 == b {f = 1; next} f && $0 == e {f = 0; next} !f' "$hba" >"$tmp/hba"
	[ -z "$want_block" ] || printf '%s\n' "$want_block" >>"$tmp/hba"
	cat "$tmp/hba" >"$hba" || fail 1 "write $hba"
	hba_changed=true config_changed=true changed=true
fi

# listen_addresses through ALTER SYSTEM (postgresql.auto.conf), compared
# with the running value: a change needs a restart.
listen_changed=false
if [ "$cur_listen" != "$listen" ]; then
	pgsql -c "ALTER SYSTEM SET listen_addresses = '$listen'" 2>"$tmp/log" || fail 1 "set listen_addresses: $(cat "$tmp/log")"
	listen_changed=true config_changed=true changed=true
fi
if [ "$listen_changed" = true ]; then
	pg_ctlcluster "$ver" main restart >"$tmp/log" 2>&1 || fail 1 "pg_ctlcluster $ver main restart: $(tail -n 5 "$tmp/log")"
	restarted=true
elif [ "$hba_changed" = true ]; then
	pg_ctlcluster "$ver" main reload >"$tmp/log" 2>&1 || fail 1 "pg_ctlcluster $ver main reload: $(tail -n 5 "$tmp/log")"
fi

# Verify over TCP as every user, with its password in a private .pgpass,
# on the first database it owns or else on postgres.
vhost=
for a in $(printf '%s' "$listen" | tr ',' ' '); do
	case $a in
	'*' | localhost | 127.0.0.1 | 0.0.0.0) vhost=127.0.0.1 && break ;;
	::1 | ::) vhost=::1 && break ;;
	*) [ -n "$vhost" ] || vhost=$a ;;
	esac
done
verify() {
	PGPASSFILE="$tmp/pgpass" PGCONNECT_TIMEOUT=10 psql -X -A -t -w -v VERBOSITY=terse \
		-h "$vhost" -p "$port" -U "$1" -d "$2" -c 'SELECT 1' 2>"$tmp/verify" </dev/null
}
for u in $users; do
	vdb=postgres
	for d in $dbs; do
		if [ "${d#*:}" = "$u" ]; then
			vdb=${d%%:*}
			break
		fi
	done
	printf '*:*:*:*:' >"$tmp/pgpass"
	sed 's/[\\:]/\\&/g' "$tmp/pw.$u" | tr -d '\n' >>"$tmp/pgpass"
	ok=$(verify "$u" "$vdb")
	if [ "$ok" != 1 ] && ! has "$u" "$created_roles" &&
		grep -q -e 'password authentication failed' -e 'is not permitted to log in' "$tmp/verify"; then
		{
			printf 'ALTER ROLE "%s" WITH LOGIN PASSWORD ' "$u"
			password_sql "$u"
			printf ';\n'
		} | pgsql 2>"$tmp/log" || fail 1 "set the password of role $u: $(cat "$tmp/log")"
		changed=true password_changed=true
		ok=$(verify "$u" "$vdb")
	fi
	[ "$ok" = 1 ] || fail 11 "SELECT 1 as $u on $vhost:$port/$vdb failed: $(cat "$tmp/verify")"
done

printf '{"changed":%s,"installed":%s,"config_changed":%s,"restarted":%s,"role_created":%s,"db_created":%s,"password_changed":%s,"pg_version":"%s"}\n' \
	"$changed" "$installed" "$config_changed" "$restarted" "$role_created" "$db_created" "$password_changed" "$pg_version"
