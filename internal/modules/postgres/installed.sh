# core.postgres.installed, run as root with /bin/sh on the soul in one round
# trip. Arguments: pg_version (empty: the distribution's), db_name, db_user,
# listen_addresses, allow_remote (true|false), remote_cidr. Standard input
# is two lines: the password, then its SCRAM-SHA-256 verifier (empty when
# the keeper could not make one). The password only ever goes to files in
# a private temporary directory (mode 0700, removed on exit) and to psql's
# standard input, never to an argument or an environment variable; role
# statements carry the verifier when there is one. The last line of
# standard output is a JSON report; errors go to standard error with exit
# status 10 (install failed), 11 (verify failed) or 1 (anything else).
set -u
umask 077
cd /
want_ver=$1 db=$2 user=$3 listen=$4 remote=$5 cidr=$6
export DEBIAN_FRONTEND=noninteractive
tmp=$(mktemp -d) || exit 1
trap 'rm -rf -- "$tmp"' EXIT
IFS= read -r pw || true
IFS= read -r verifier || true
printf '%s' "$pw" >"$tmp/pw"
unset pw

changed=false installed=false config_changed=false restarted=false
role_created=false db_created=false password_changed=false

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
# with its signing key, as its documentation describes.
add_pgdg() {
	# shellcheck disable=SC1091
	. /etc/os-release
	command -v curl >/dev/null 2>&1 || apt_install ca-certificates curl
	key=/usr/share/postgresql-common/pgdg/apt.postgresql.org.asc
	install -d -m 0755 "$(dirname "$key")"
	curl -fsSL -o "$key.new" https://www.postgresql.org/media/keys/ACCC4CF8.asc ||
		fail 10 "download the PostgreSQL apt repository key failed"
	chmod 0644 "$key.new" && mv "$key.new" "$key"
	printf 'deb [signed-by=%s] https://apt.postgresql.org/pub/repos/apt %s-pgdg main\n' \
		"$key" "${VERSION_CODENAME:?}" >/etc/apt/sources.list.d/pgdg.list
	chmod 0644 /etc/apt/sources.list.d/pgdg.list
	apt_get update || fail 10 "apt-get update with the PostgreSQL repository: $(tail -n 5 "$tmp/apt.log")"
}

# newest_server prints the newest major version whose server is installed.
newest_server() {
	for b in /usr/lib/postgresql/*/bin/postgres; do
		[ -x "$b" ] && basename "$(dirname "$(dirname "$b")")"
	done | sort -n | tail -n 1
}

ver=$want_ver
if [ -n "$ver" ]; then
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
if [ -z "$line" ]; then
	pg_createcluster "$ver" main >"$tmp/log" 2>&1 || fail 1 "pg_createcluster $ver main: $(tail -n 5 "$tmp/log")"
	changed=true
	line=$(cluster)
fi
port=$(printf '%s\n' "$line" | awk '{print $3}')
case $(printf '%s\n' "$line" | awk '{print $4}') in
online*) ;;
*)
	pg_ctlcluster "$ver" main start >"$tmp/log" 2>&1 || fail 1 "pg_ctlcluster $ver main start: $(tail -n 5 "$tmp/log")"
	changed=true
	;;
esac

# pgsql runs psql as the postgres superuser on the cluster; terse errors
# carry no statement text, so a failed statement never echoes a password.
pgsql() {
	runuser -u postgres -- psql --cluster "$ver/main" -X -q -A -t -v ON_ERROR_STOP=1 -v VERBOSITY=terse -d postgres "$@"
}

# password_sql prints the verifier, or else the password, as an SQL string
# literal (standard_conforming_strings is on since PostgreSQL 9.1).
password_sql() {
	if [ -n "$verifier" ]; then
		printf "'%s'" "$verifier"
		return
	fi
	printf "'"
	sed "s/'/''/g" "$tmp/pw" | tr -d '\n'
	printf "'"
}

state=$(pgsql -F '|' -c "SELECT (SELECT count(*) FROM pg_roles WHERE rolname = '$user'), (SELECT count(*) FROM pg_database WHERE datname = '$db'), current_setting('listen_addresses'), current_setting('hba_file'), split_part(current_setting('server_version'), ' ', 1)" 2>"$tmp/log") ||
	fail 1 "query the cluster's state: $(cat "$tmp/log")"
IFS='|' read -r has_role has_db cur_listen hba pg_version <<EOF
$state
EOF

if [ "$has_role" = 0 ]; then
	{
		printf 'CREATE ROLE "%s" LOGIN PASSWORD ' "$user"
		password_sql
		printf ';\n'
	} | pgsql 2>"$tmp/log" || fail 1 "create role $user: $(cat "$tmp/log")"
	changed=true role_created=true
fi
if [ "$has_db" = 0 ]; then
	pgsql -c "CREATE DATABASE \"$db\" OWNER \"$user\"" 2>"$tmp/log" || fail 1 "create database $db: $(cat "$tmp/log")"
	changed=true db_created=true
fi

# pg_hba.conf: one managed block, present only when remote access is asked.
begin='# BEGIN soulstack core.postgres.installed'
end='# END soulstack core.postgres.installed'
want_block=
if [ "$remote" = true ]; then
	# Quoted names are literal: a database called "all" means only itself.
	want_block=$(printf '%s\nhost\t"%s"\t"%s"\t%s\tscram-sha-256\n%s' "$begin" "$db" "$user" "$cidr" "$end")
fi
cur_block=$(awk -v b="$begin" -v e="$end" '$0 == b {f = 1} f {print} $0 == e {f = 0}' "$hba")
hba_changed=false
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

# Verify over TCP as the user, with the password in a private .pgpass.
vhost=
set -f
for a in $(printf '%s' "$listen" | tr ',' ' '); do
	case $a in
	'*' | localhost | 127.0.0.1 | 0.0.0.0) vhost=127.0.0.1 && break ;;
	::1 | ::) vhost=::1 && break ;;
	*) [ -n "$vhost" ] || vhost=$a ;;
	esac
done
set +f
printf '*:*:*:*:' >"$tmp/pgpass"
sed 's/[\\:]/\\&/g' "$tmp/pw" | tr -d '\n' >>"$tmp/pgpass"
verify() {
	PGPASSFILE="$tmp/pgpass" PGCONNECT_TIMEOUT=10 psql -X -A -t -w -v VERBOSITY=terse \
		-h "$vhost" -p "$port" -U "$user" -d "$db" -c 'SELECT 1' 2>"$tmp/verify" </dev/null
}
ok=$(verify)
if [ "$ok" != 1 ] && [ "$role_created" = false ] &&
	grep -q -e 'password authentication failed' -e 'is not permitted to log in' "$tmp/verify"; then
	{
		printf 'ALTER ROLE "%s" WITH LOGIN PASSWORD ' "$user"
		password_sql
		printf ';\n'
	} | pgsql 2>"$tmp/log" || fail 1 "set the password of role $user: $(cat "$tmp/log")"
	changed=true password_changed=true
	ok=$(verify)
fi
[ "$ok" = 1 ] || fail 11 "SELECT 1 as $user on $vhost:$port/$db failed: $(cat "$tmp/verify")"

printf '{"changed":%s,"installed":%s,"config_changed":%s,"restarted":%s,"role_created":%s,"db_created":%s,"password_changed":%s,"pg_version":"%s"}\n' \
	"$changed" "$installed" "$config_changed" "$restarted" "$role_created" "$db_created" "$password_changed" "$pg_version"
