#!/usr/bin/env bash
# Starts and stops a local PostgreSQL server for tests and demos, without Docker.
#
#   scripts/postgres.sh up        initdb (once) and start; waits until it answers
#   scripts/postgres.sh down      stop (fast shutdown); --purge also deletes the data
#   scripts/postgres.sh stop      stop, keeping the data (fault injection: "server gone")
#   scripts/postgres.sh start     start an initialised cluster again
#   scripts/postgres.sh restart   stop + start (tests call it through TEST_POSTGRES_CTL)
#   scripts/postgres.sh env       print the connection settings as shell exports
#   scripts/postgres.sh status    exit 0 when the server answers
#
# Two instances exist: "main" (port 55432) for ordinary tests and demos, and
# "faults" (port 55433), which fault tests stop and restart without
# disturbing tests that run beside them. PG_INSTANCE picks one for
# start/stop/restart/status; up, down and env act on both.
#
# The binaries come from PATH or from Debian's versioned folder
# (/usr/lib/postgresql/<version>/bin). initdb and postgres refuse to run as
# root, so when run as root they run as the `postgres` user.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
db=lockfree

# use INSTANCE sets the variables of one instance.
use() {
	instance=$1
	case "$instance" in
	main) port=${PGPORT_LOCKFREE:-55432} ;;
	faults) port=${PGPORT_LOCKFREE_FAULTS:-55433} ;;
	*)
		echo "postgres.sh: unknown instance $instance" >&2
		exit 2
		;;
	esac
	dir=$root/.services/postgres-$instance
	data=$dir/data
	log=$dir/postgres.log
}
use "${PG_INSTANCE:-main}"

say() { echo "postgres.sh ($instance): $*" >&2; }

find_bin() {
	local name=$1 candidate
	if command -v "$name" >/dev/null 2>&1; then
		command -v "$name"
		return
	fi
	for candidate in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
		if [ -x "$candidate/$name" ]; then
			echo "$candidate/$name"
			return
		fi
	done
	say "cannot find $name: install PostgreSQL (apt-get install postgresql) or put its bin folder on PATH"
	exit 1
}

# as_owner runs a command as the data folder's owner: postgres when we are root.
as_owner() {
	if [ "$(id -u)" = 0 ]; then
		# runuser keeps no tty requirements; the folder must be reachable by postgres.
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

answers() {
	local isready
	isready=$(find_bin pg_isready)
	"$isready" -q -h 127.0.0.1 -p "$port" -d postgres -U postgres >/dev/null 2>&1
}

running() {
	[ -f "$data/postmaster.pid" ] && as_owner "$(find_bin pg_ctl)" -D "$data" status >/dev/null 2>&1
}

init() {
	[ -f "$data/PG_VERSION" ] && return
	mkdir -p "$dir"
	if [ "$(id -u)" = 0 ]; then
		if ! id postgres >/dev/null 2>&1; then
			useradd --system --home-dir /var/lib/postgresql --shell /bin/bash postgres
		fi
		chown postgres: "$dir"
		# Every parent folder must be traversable by postgres.
		local p=$dir
		while [ "$p" != / ]; do
			p=$(dirname "$p")
			[ -x "$p" ] || chmod o+x "$p"
		done
	fi
	say "initdb into $data"
	as_owner "$(find_bin initdb)" -D "$data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 ||
		{ cat "$dir/initdb.log" >&2; exit 1; }
	cat >>"$data/postgresql.conf" <<EOF

# lockfree test server (scripts/postgres.sh)
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir'
max_connections = 300
shared_buffers = 256MB
synchronous_commit = on
fsync = on
log_min_messages = warning
log_min_error_statement = panic
EOF
}

start() {
	if running && answers; then
		return
	fi
	[ -f "$data/PG_VERSION" ] || { say "no cluster in $data: run '$0 up'"; exit 1; }
	say "starting on 127.0.0.1:$port"
	as_owner "$(find_bin pg_ctl)" -D "$data" -l "$log" -w -t 60 start >/dev/null ||
		{ tail -n 30 "$log" >&2; exit 1; }
	local i
	for i in $(seq 1 120); do
		answers && break
		sleep 0.5
	done
	answers || { say "server did not answer on port $port"; tail -n 30 "$log" >&2; exit 1; }
	if ! "$(find_bin psql)" -h 127.0.0.1 -p "$port" -U postgres -d postgres -tAc \
		"SELECT 1 FROM pg_database WHERE datname = '$db'" | grep -q 1; then
		"$(find_bin psql)" -h 127.0.0.1 -p "$port" -U postgres -d postgres -qc "CREATE DATABASE $db" >/dev/null
	fi
}

stop() {
	running || return 0
	say "stopping"
	as_owner "$(find_bin pg_ctl)" -D "$data" -m fast -w -t 60 stop >/dev/null
}

case "${1:-}" in
up)
	for i in main faults; do
		use $i
		init
		start
	done
	;;
start) start ;;
stop) stop ;;
restart)
	stop
	start
	;;
down)
	for i in main faults; do
		use $i
		stop
		if [ "${2:-}" = --purge ]; then
			rm -rf "$dir"
		fi
	done
	;;
env)
	use main
	echo "export TEST_DATABASE_URL='postgres://postgres@127.0.0.1:$port/$db?sslmode=disable'"
	use faults
	echo "export TEST_FAULT_DATABASE_URL='postgres://postgres@127.0.0.1:$port/$db?sslmode=disable'"
	echo "export TEST_FAULT_POSTGRES_CTL='PG_INSTANCE=faults $root/scripts/postgres.sh'"
	;;
status) running && answers ;;
*)
	echo "usage: $0 up|down [--purge]|start|stop|restart|env|status" >&2
	exit 2
	;;
esac
