#!/usr/bin/env bash
# Starts and stops local PostgreSQL servers for tests and demos, without Docker.
#
#   scripts/postgres.sh up        initdb (once) and start; waits until it answers
#   scripts/postgres.sh down      stop (fast shutdown); --purge also deletes the data
#   scripts/postgres.sh stop      stop, keeping the data (fault injection: "server gone")
#   scripts/postgres.sh start     start an initialised cluster again, on its port
#   scripts/postgres.sh restart   stop + start (tests call it through TEST_FAULT_POSTGRES_CTL)
#   scripts/postgres.sh env       print the connection settings as shell exports
#   scripts/postgres.sh status    exit 0 when the server answers
#
# Two instances exist: "main" for ordinary tests and demos, and "faults",
# which fault tests stop and restart without disturbing tests that run beside
# them. PG_INSTANCE picks one for start/stop/restart/status; up, down and env
# act on both.
#
# Ports: 25432 (main) and 25433 (faults) when both are free; when another
# process holds one (another checkout's server), `up` says so and uses this
# checkout's own ports (see scripts/lib/service.sh). PGPORT_LOCKFREE and
# PGPORT_LOCKFREE_FAULTS set them. The ports are remembered in
# .services/postgres.ports; `env` prints the ones in use.
#
# Binaries: PG_BINDIR, else the folder initdb on PATH links to, else the newest of
# Debian's /usr/lib/postgresql/<version>/bin.
#
# As root the servers run as the `postgres` user, and their data goes where
# that user can reach it: see scripts/lib/pg.sh.
#
# Authentication: scram-sha-256 on 127.0.0.1 only (no Unix socket). The
# superuser postgres has a random password, kept in .services/postgres.password
# (mode 0600); the URLs `env` prints carry it. A cluster made before passwords
# (trust) gets the password and scram-sha-256 at its next `up` or `start`; its
# data stays.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
me=postgres.sh
cmd=${1:-}
# shellcheck source-path=SCRIPTDIR source=lib/service.sh
. "$root/scripts/lib/service.sh"
# shellcheck source-path=SCRIPTDIR source=lib/pg.sh
. "$root/scripts/lib/pg.sh"
db=lockfree

# use INSTANCE sets the variables of one instance.
use() {
	instance=$1
	case "$instance" in
	main) default=25432 offset=0 var=PGPORT_LOCKFREE ;;
	faults) default=25433 offset=1 var=PGPORT_LOCKFREE_FAULTS ;;
	*) die "unknown instance $instance (PG_INSTANCE is main or faults)" ;;
	esac
	me="postgres.sh ($instance)"
	dir=$(pg_base postgres-main/data/PG_VERSION)/postgres-$instance
	# down may remove what the checks refuse.
	[ "$cmd" = down ] || pg_check_dir "$dir"
	data=$dir/data
	log=$dir/postgres.log
}

# remembered_port: the instance's port when it is not running: remembered,
# else (a cluster made before ports were remembered) the one in its config.
remembered_port() {
	local p
	p=$(ports_get postgres "$instance")
	[ -n "$p" ] || p=$(sed -n 's/^port = \([0-9][0-9]*\)$/\1/p' "$data/postgresql.conf" 2>/dev/null | tail -n 1)
	echo "$p"
}

# pid_port: the port of the running server, from its pid file.
pid_port() { sed -n 4p "$data/postmaster.pid" 2>/dev/null; }

answers() { "$bin/pg_isready" -q -h 127.0.0.1 -p "$port" -d postgres -U postgres >/dev/null 2>&1; }

running() {
	[ -f "$data/postmaster.pid" ] && as_owner "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1
}

init() {
	[ -f "$data/PG_VERSION" ] && return
	pg_user
	use "$instance" # where the data goes may change now that postgres exists
	pg_make_dir "$dir"
	say "initdb into $data"
	pg_initdb "$data" "$PGPASSWORD" "$dir/initdb.log"
	# The port is given at each start (-p). No Unix socket: the clients use
	# TCP, and a socket path in a deep folder can exceed its 107-byte limit.
	as_owner tee -a "$data/postgresql.conf" >/dev/null <<EOF

# lockfree test server (scripts/postgres.sh)
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
max_connections = 300
shared_buffers = 256MB
synchronous_commit = on
fsync = on
log_min_messages = warning
log_min_error_statement = panic
EOF
}

# wait_answer waits up to a minute for the server to answer on $port.
wait_answer() {
	local i
	for i in $(seq 1 120); do
		answers && return
		sleep 0.5
	done
	die "the server did not answer on port $port (log: $log)"
}

# launch [EXCLUDE…] starts the instance's server on $port and waits until it
# answers. Under `up` (moving=yes), a port another process took meanwhile moves
# to the next free one, never one of EXCLUDE.
launch() {
	local attempt from
	for attempt in 1 2 3 4 5; do
		say "starting on 127.0.0.1:$port"
		from=$(pg_log_size "$log")
		# 9>&-: the server must not inherit the lock that service_lock holds.
		if as_owner "$bin/pg_ctl" -D "$data" -l "$log" -o "-p $port" -w -t 60 start >/dev/null 9>&-; then
			break
		fi
		if [ "$moving" = yes ] && [ "$attempt" -lt 5 ] && pg_bind_failed "$log" "$from"; then
			port=$(move_port postgres "$instance" "$offset" "$var" "$port" "$@")
			continue
		fi
		as_owner tail -n 20 "$log" >&2
		die "the server did not start (log: $log)"
	done
	wait_answer
	secure
	if ! psql_c "SELECT 1 FROM pg_database WHERE datname = '$db'" | grep -q 1; then
		psql_c "CREATE DATABASE $db" >/dev/null
	fi
}

psql_c() { "$bin/psql" -X -h 127.0.0.1 -p "$port" -U postgres -d postgres -v ON_ERROR_STOP=1 -tAqc "$1"; }

# secure: a cluster made before passwords (trust) gets the password and
# scram-sha-256; otherwise the password must open it.
secure() {
	if pg_trusts "$data"; then
		say "the cluster lets anyone in without a password (made before passwords):" \
			"setting the password of $(secret_file postgres) and scram-sha-256; the URLs of" \
			"\`scripts/postgres.sh env\` change: eval it again"
		psql_c "SET password_encryption = 'scram-sha-256'; ALTER ROLE postgres PASSWORD '$PGPASSWORD'" >/dev/null
		as_owner tee "$data/pg_hba.conf" >/dev/null <<EOF
# lockfree test server (scripts/postgres.sh): TCP on 127.0.0.1 only, with the password
host all all 127.0.0.1/32 scram-sha-256
EOF
		psql_c 'SELECT pg_reload_conf()' >/dev/null
		! pg_trusts "$data" || die "pg_hba.conf of $data still trusts connections"
	fi
	psql_c 'SELECT 1' >/dev/null 2>&1 ||
		die "the password in $(secret_file postgres) does not open the cluster in $data" \
			"(password file replaced?): scripts/postgres.sh down --purge, then up, makes it anew"
}

# start starts the instance on its remembered port: a fault test's server
# must come back where its URL points.
start() {
	if running; then
		port=$(pid_port)
		return
	fi
	[ -f "$data/PG_VERSION" ] || die "no cluster in $data: run scripts/postgres.sh up"
	port=$(remembered_port)
	[ -n "$port" ] || die "no port remembered for $instance: run scripts/postgres.sh up"
	if port_taken "$port"; then
		die "port $port is taken$(port_holder "$port");" \
			"scripts/postgres.sh up chooses another"
	fi
	moving=no launch
}

stop() {
	running || return 0
	say "stopping"
	as_owner "$bin/pg_ctl" -D "$data" -m fast -w -t 60 stop >/dev/null
}

up() {
	local i chosen="" group="" ports=()
	for i in main faults; do
		use "$i"
		init
	done
	# Ports first, all of them: a server started here must not look like
	# another process on a port chosen next.
	for i in main faults; do
		use "$i"
		running || group="$group $default"
	done
	for i in main faults; do
		use "$i"
		if running; then
			port=$(pid_port)
			ports_set postgres "$i" "$port"
		else
			# shellcheck disable=SC2086 # chosen is a list
			port=$(choose_port postgres "$i" "$default" "$offset" "$var" "$group" $chosen)
		fi
		chosen="$chosen $port"
		ports+=("$port")
	done
	for i in main faults; do
		use "$i"
		port=${ports[0]}
		ports=("${ports[@]:1}")
		if running; then
			wait_answer
			secure
		else
			# shellcheck disable=SC2086 # chosen is a list
			moving=yes launch $chosen
			chosen="$chosen $port"
		fi
	done
}

down() {
	local i
	for i in main faults; do
		use "$i"
		stop
	done
	[ "${1:-}" = --purge ] || return 0
	for i in main faults; do
		use "$i"
		pg_remove "$dir"
	done
	rm -rf "$root/.services"/postgres-* "$(secret_file postgres)"
	pg_purge_outside
	rm -f "$(ports_file postgres)"
}

# env_port: the port of the instance's server: the running server's, else the
# remembered one.
env_port() {
	use "$1"
	port=$(pid_port)
	if [ -z "$port" ] || ! kill -0 "$(sed -n 1p "$data/postmaster.pid")" 2>/dev/null; then
		port=$(remembered_port)
	fi
	[ -n "$port" ] || die "not set up in $root: run scripts/postgres.sh up"
	echo "$port"
}

print_env() {
	local main faults password
	main=$(env_port main)
	faults=$(env_port faults)
	password=$(secret_get postgres)
	[ -n "$password" ] || die "no password in $(secret_file postgres) (a cluster made before" \
		"passwords): run scripts/postgres.sh up, which sets it"
	echo "export TEST_DATABASE_URL='postgres://postgres:$password@127.0.0.1:$main/$db?sslmode=disable'"
	echo "export TEST_FAULT_DATABASE_URL='postgres://postgres:$password@127.0.0.1:$faults/$db?sslmode=disable'"
	printf 'export TEST_FAULT_POSTGRES_CTL=%q\n' "PG_INSTANCE=faults $(printf %q "$root/scripts/postgres.sh")"
}

case "${1:-}" in
up | start | restart)
	# Under the lock: two commands at once must agree on the password.
	service_lock postgres
	PGPASSWORD=$(secret postgres)
	export PGPASSWORD
	;;
esac
case "${1:-}" in
up | start | stop | restart | down | status)
	pg_find_bin
	use "${PG_INSTANCE:-main}"
	;;
esac
case "${1:-}" in
up) up ;;
start) start ;;
stop)
	service_lock postgres
	stop
	;;
restart)
	stop
	start
	;;
down)
	service_lock postgres
	down "${2:-}"
	;;
env) print_env ;;
status)
	running && port=$(pid_port) && answers
	;;
*)
	echo "usage: $0 up|down [--purge]|start|stop|restart|env|status" >&2
	exit 2
	;;
esac
