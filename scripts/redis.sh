#!/usr/bin/env bash
# Starts and stops a local Redis server for tests and demos, without Docker.
#
#   scripts/redis.sh up             start it (idempotent) and wait until it answers PING
#   scripts/redis.sh down [--purge] stop it; --purge also deletes its folder
#   scripts/redis.sh env            print `export TEST_REDIS_ADDR=…` (for eval)
#   scripts/redis.sh status         exit 0 when it answers
#
# It listens on 127.0.0.1 only, keeps nothing on disk (no RDB, no AOF) and
# runs as the calling user; its pid file and log are in .services/redis/.
#
# Port: 56379 when free, else this checkout's own (see scripts/lib/service.sh);
# REDIS_PORT sets it. Remembered in .services/redis.ports.
#
# Binary: REDIS_SERVER, else redis-server on PATH. When it is missing and we
# are root, `up` installs Debian's redis-server package with apt-get.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
me=redis.sh
# shellcheck source-path=SCRIPTDIR source=lib/service.sh
. "$root/scripts/lib/service.sh"
dir=$root/.services/redis
pidfile=$dir/redis.pid
log=$dir/redis.log

# find_server sets server, installing Debian's package when we may.
find_server() {
	if [ -n "${REDIS_SERVER:-}" ]; then
		server=$REDIS_SERVER
		[ -x "$server" ] || die "REDIS_SERVER=$server is not a program: apt-get install redis-server"
		return
	fi
	if ! command -v redis-server >/dev/null 2>&1; then
		if ! is_root || ! command -v apt-get >/dev/null 2>&1; then
			die "redis-server not found: apt-get install redis-server"
		fi
		install_server
	fi
	server=$(command -v redis-server)
}

# install_server installs redis-server with apt-get, updating the package
# lists first when they do not know it (a new machine).
install_server() {
	local out=$root/.services/redis-install.log
	mkdir -p "$root/.services"
	say "redis-server not found: installing it (apt-get install redis-server; log: $out)"
	export DEBIAN_FRONTEND=noninteractive
	if ! apt-get install -y --no-install-recommends redis-server >"$out" 2>&1; then
		{ apt-get update && apt-get install -y --no-install-recommends redis-server; } >>"$out" 2>&1 ||
			die "apt-get install redis-server failed: $(tail -n 1 "$out")"
	fi
}

# pid: the pid of this checkout's server, if it runs.
pid() {
	local p
	[ -f "$pidfile" ] || return 1
	p=$(<"$pidfile")
	[[ $p =~ ^[0-9]+$ ]] && kill -0 "$p" 2>/dev/null || return 1
	# Redis sets its title to "redis-server 127.0.0.1:<port>".
	grep -qa "redis-server" "/proc/$p/cmdline" 2>/dev/null || return 1
	echo "$p"
}

# running_port: the port of the running server, from its title.
running_port() {
	local p
	p=$(pid) || return 1
	tr '\0' ' ' <"/proc/$p/cmdline" | sed -n 's/.*127\.0\.0\.1:\([0-9][0-9]*\).*/\1/p'
}

# answers: PING on $port gets +PONG.
answers() {
	local reply
	# shellcheck disable=SC2016 # $1 is the inner shell's
	reply=$(timeout 2 bash -c 'exec 3<>/dev/tcp/127.0.0.1/$1 && printf "PING\r\n" >&3 && head -c 5 <&3' _ "$port" 2>/dev/null) || return 1
	[ "$reply" = "+PONG" ]
}

wait_answer() {
	local i
	for i in $(seq 1 100); do
		answers && return
		# The daemon writes its pid file after it forks, a while after the
		# command returned: only a pid file whose server is gone means it died.
		if [ -f "$pidfile" ] && ! pid >/dev/null; then
			break
		fi
		sleep 0.2
	done
	tail -n 20 "$log" >&2 || true
	die "redis-server did not answer on 127.0.0.1:$port (log: $log)"
}

up() {
	find_server
	if port=$(running_port) && [ -n "$port" ]; then
		ports_set redis redis "$port"
		wait_answer
		return
	fi
	port=$(choose_port redis redis 56379 2 REDIS_PORT 56379)
	mkdir -p "$dir"
	rm -f "$pidfile"
	say "starting on 127.0.0.1:$port"
	"$server" --bind 127.0.0.1 --port "$port" --daemonize yes --pidfile "$pidfile" \
		--logfile "$log" --dir "$dir" --save "" --appendonly no >/dev/null 9>&- ||
		die "redis-server did not start (log: $log)"
	wait_answer
}

down() {
	local p
	if p=$(pid); then
		say "stopping (pid $p)"
		kill -TERM "$p"
		while kill -0 "$p" 2>/dev/null; do sleep 0.1; done
	fi
	rm -f "$pidfile"
	if [ "${1:-}" = --purge ]; then
		rm -rf "$dir" "$(ports_file redis)" "$root/.services/redis-install.log"
	fi
}

case "${1:-}" in
up)
	service_lock redis
	up
	;;
down)
	service_lock redis
	down "${2:-}"
	;;
env)
	port=$(running_port) || port=$(ports_get redis redis)
	[ -n "$port" ] || die "not set up in $root: run scripts/redis.sh up"
	echo "export TEST_REDIS_ADDR=127.0.0.1:$port"
	;;
status)
	port=$(running_port) && answers
	;;
*)
	echo "usage: $0 up|down [--purge]|env|status" >&2
	exit 2
	;;
esac
