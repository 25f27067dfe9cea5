#!/usr/bin/env bash
# A PostgreSQL primary with a streaming standby on this machine, for failover tests: node1 starts
# as the primary, node2 as its standby (pg_basebackup, primary_conninfo with
# application_name=node2). Not part of `make services`: the tests that need it start it.
#
#   scripts/pg-replication.sh up [async|sync]  make (once) and start both nodes; waits until
#                                    they answer and the standby streams. sync: the primary's
#                                    synchronous_standby_names names the standby, so a commit
#                                    returns once the standby has flushed it. Default: async,
#                                    or REPL_MODE.
#   scripts/pg-replication.sh down [--purge]   stop both nodes; --purge deletes their data
#   scripts/pg-replication.sh env    print the URLs as shell exports: TEST_REPL_NODE1_URL,
#                                    TEST_REPL_NODE2_URL, TEST_REPL_URL (both hosts,
#                                    target_session_attrs=read-write: the primary, whichever
#                                    node it is) and TEST_REPL_CTL (this script)
#   scripts/pg-replication.sh status print each node's role, timeline and receiver state
#   scripts/pg-replication.sh mode async|sync   switch the current primary's synchronous mode
#                                    (ALTER SYSTEM, reload)
#   scripts/pg-replication.sh promote [NODE]    promote the standby (default: the node in
#                                    recovery) and wait until it accepts writes, nothing more: the
#                                    post-promotion checkpoint still runs, as after a real failover
#                                    (pg_control_checkpoint() shows the old timeline until it ends);
#                                    the old primary keeps running: stop, kill or isolate it
#   scripts/pg-replication.sh stop NODE    fast shutdown
#   scripts/pg-replication.sh kill NODE    SIGKILL the postmaster, then its children once they
#                                    noticed (a crash: no shutdown checkpoint)
#   scripts/pg-replication.sh start NODE   start a stopped or killed node on its port
#   scripts/pg-replication.sh isolate NODE cut NODE off, as a network partition would: it refuses
#                                    new connections (pg_hba: reject, reload; pgx then tries the
#                                    next host of TEST_REPL_URL, libpq does not) and its
#                                    replication connections are cut; sessions already open stay,
#                                    like clients on its side of the partition
#   scripts/pg-replication.sh heal NODE    undo isolate
#   scripts/pg-replication.sh receiver-stop [NODE]   stop the standby's WAL receiver
#                                    (primary_conninfo emptied, reload): the standby falls behind;
#                                    in sync mode the primary's commits wait
#   scripts/pg-replication.sh receiver-start [NODE]  start it again (primary_conninfo restored)
#   scripts/pg-replication.sh rebuild NODE  make NODE a new standby of the other node (its data is
#                                    replaced by a pg_basebackup): after a failover, the old
#                                    primary rejoins
#
# NODE is 1 or 2 (node1, node2). Ports: 25434 (node1) and 25435 (node2) when both are free, else
# this checkout's own (see scripts/lib/service.sh); REPL_PORT1 and REPL_PORT2 set them.
# Remembered in .services/pg-replication.ports. The data is in .services/pg-replication/ (as
# root: see scripts/lib/pg.sh). REPL_DIR, a folder, takes the place of the checkout for all of
# that (REPL_DIR/.services/…): a pair of its own beside the checkout's, as each test binary of
# internal/replpair makes. The script connects as the superuser lockfree_ctl, which isolate
# leaves admitted. status prints the timeline each node writes or receives on.
#
# Authentication: scram-sha-256 on 127.0.0.1 only (no Unix socket), replication included. The
# superusers postgres and lockfree_ctl share a random password, kept in
# .services/pg-replication.password (mode 0600); the URLs `env` prints carry it. A pair made
# before passwords (trust) is made anew by `up`, with a message: its data is test data.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
me=pg-replication.sh
# shellcheck source-path=SCRIPTDIR source=lib/service.sh
. "$root/scripts/lib/service.sh"
# shellcheck source-path=SCRIPTDIR source=lib/pg.sh
. "$root/scripts/lib/pg.sh"
db=lockfree
ctl_user=lockfree_ctl
self=$root/scripts/pg-replication.sh
if [ -n "${REPL_DIR:-}" ]; then
	# Everything the pair keeps (data, ports, lock) follows root.
	root=$(cd "$REPL_DIR" && pwd) || die "REPL_DIR=$REPL_DIR is not a folder"
	pg_outside=/var/lib/postgresql/lockfree-$(checkout_hash)
fi

# node N sets the variables of node N (1 or 2); other is the other node's number.
node() {
	n=${1#node}
	case "$n" in
	1) default=25434 offset=3 var=REPL_PORT1 other=2 ;;
	2) default=25435 offset=4 var=REPL_PORT2 other=1 ;;
	*) die "no node $1: nodes are 1 and 2" ;;
	esac
	me="pg-replication.sh (node$n)"
	dir=$(pg_base pg-replication/node1/data/PG_VERSION)/pg-replication/node$n
	# down may remove what the checks refuse.
	[ "$cmd" = down ] || pg_check_dir "$dir"
	data=$dir/data
	log=$dir/postgres.log
	port=$(ports_get pg-replication "node$n")
}

running() {
	[ -f "$data/postmaster.pid" ] && as_owner "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1
}

answers() { "$bin/pg_isready" -q -h 127.0.0.1 -p "$port" -d postgres >/dev/null 2>&1; }

# sql [PSQL ARGS…] QUERY: runs QUERY on the current node and prints the result unaligned.
sql() {
	PGCONNECT_TIMEOUT=10 "$bin/psql" -X -h 127.0.0.1 -p "$port" -U "$ctl_user" -d postgres -v ON_ERROR_STOP=1 -tAq -c "$@"
}

in_recovery() { [ "$(sql 'SELECT pg_is_in_recovery()')" = t ]; }

# timeline: the timeline the current node writes WAL on (a primary) or receives (a standby).
# pg_control_checkpoint() would lag: a promoted node reports its old timeline there until the
# post-promotion checkpoint ends, which can take minutes.
timeline() {
	if in_recovery; then
		sql "SELECT coalesce((SELECT received_tli FROM pg_stat_wal_receiver)::text, 'none received')"
	else
		sql "SELECT ('x' || left(pg_walfile_name(pg_current_wal_lsn()), 8))::bit(32)::bigint"
	fi
}
writable() { ! in_recovery; }
receiver_gone() { [ "$(sql 'SELECT count(*) FROM pg_stat_wal_receiver')" = 0 ]; }

wait_until() {
	local what=$1 i
	shift
	for i in $(seq 1 120); do
		"$@" && return 0
		sleep 0.5
	done
	die "$what: not after 60 s (log: $log)"
}

# conninfo N: primary_conninfo for a standby of node N.
conninfo() {
	echo "host=127.0.0.1 port=$(ports_get pg-replication "node$1") user=postgres${PGPASSWORD:+ password=$PGPASSWORD} application_name=node$n"
}

# set_conf NAME VALUE: sets a parameter of the current node; reloads it when it runs.
set_conf() {
	if running; then
		sql "ALTER SYSTEM SET $1 = '$2'" && sql 'SELECT pg_reload_conf()' >/dev/null
	else
		as_owner sed -i "/^$1 = /d" "$data/postgresql.auto.conf"
		echo "$1 = '$2'" | as_owner tee -a "$data/postgresql.auto.conf" >/dev/null
	fi
}

# launch [EXCLUDE…]: starts the current node and waits until it answers. Under `up`
# (moving=yes), a port another process took meanwhile moves to the next free one, never one of
# EXCLUDE.
launch() {
	local attempt from
	if running; then
		wait_until "answering on $port" answers
		return
	fi
	[ -f "$data/PG_VERSION" ] || die "no cluster in $data: run scripts/pg-replication.sh up"
	if port_taken "$port"; then
		die "port $port is taken$(port_holder "$port"); scripts/pg-replication.sh" \
			"down, then up, chooses another"
	fi
	# A standby follows the other node wherever its port is now.
	if [ -f "$data/standby.signal" ] && [ ! -f "$dir/receiver-stopped" ]; then
		set_conf primary_conninfo "$(conninfo "$other")"
	fi
	for attempt in 1 2 3 4 5; do
		say "starting on 127.0.0.1:$port"
		from=$(pg_log_size "$log")
		if as_owner "$bin/pg_ctl" -D "$data" -l "$log" -o "-p $port" -w -t 60 start >/dev/null 9>&-; then
			break
		fi
		if [ "${moving:-no}" = yes ] && [ "$attempt" -lt 5 ] && pg_bind_failed "$log" "$from"; then
			port=$(move_port pg-replication "node$n" "$offset" "$var" "$port" "$@")
			continue
		fi
		as_owner tail -n 20 "$log" >&2
		die "the server did not start (log: $log)"
	done
	wait_until "answering on $port" answers
}

# init_primary: node1's cluster, made once.
init_primary() {
	node 1
	[ -f "$data/PG_VERSION" ] && return
	pg_user
	node 1
	pg_make_dir "$dir"
	say "initdb into $data"
	pg_initdb "$data" "$PGPASSWORD" "$dir/initdb.log"
	# No Unix socket (TCP only; a deep folder's socket path can exceed 107 bytes). wal_log_hints
	# lets pg_rewind work; wal_keep_size lets a stopped standby catch up.
	as_owner tee -a "$data/postgresql.conf" >/dev/null <<EOF

# lockfree replication test server (scripts/pg-replication.sh)
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
max_connections = 100
shared_buffers = 128MB
wal_level = replica
max_wal_senders = 10
max_replication_slots = 10
wal_keep_size = 512MB
wal_log_hints = on
hot_standby = on
hot_standby_feedback = on
wal_receiver_status_interval = 1s
log_min_messages = warning
log_min_error_statement = panic
EOF
	as_owner tee "$data/pg_hba.conf" >/dev/null <<EOF
host all $ctl_user 127.0.0.1/32 scram-sha-256
host all all 127.0.0.1/32 scram-sha-256
host replication all 127.0.0.1/32 scram-sha-256
EOF
	as_owner cp "$data/pg_hba.conf" "$dir/pg_hba.conf.open"
}

# basebackup N: node N's data becomes a copy of the other node's, as its standby.
basebackup() {
	node "$1"
	local from
	from=$(ports_get pg-replication "node$other")
	pg_user
	node "$1"
	as_owner rm -rf "$data"
	pg_make_dir "$dir"
	as_owner rm -f "$dir/receiver-stopped" "$dir/isolated"
	say "pg_basebackup from node$other (127.0.0.1:$from)"
	as_owner_to "$dir/basebackup.log" "$bin/pg_basebackup" -h 127.0.0.1 -p "$from" -U postgres \
		-D "$data" -X stream -c fast || die "pg_basebackup failed: $(as_owner tail -n 1 "$dir/basebackup.log")"
	as_owner touch "$data/standby.signal"
	# The copy carries the other node's settings: no synchronous standby of its own.
	set_conf synchronous_standby_names ''
	set_conf primary_conninfo "$(conninfo "$other")"
	as_owner cp "$data/pg_hba.conf" "$dir/pg_hba.conf.open"
}

# streaming: the current node (a standby) receives WAL.
streaming() { [ "$(sql "SELECT count(*) FROM pg_stat_wal_receiver WHERE status = 'streaming'")" = 1 ]; }

up() {
	local mode=${1:-${REPL_MODE:-async}} n1 n2 group=""
	case "$mode" in async | sync) ;; *) die "mode $mode: async or sync" ;; esac
	node 1
	if [ -f "$data/PG_VERSION" ] && pg_trusts "$data"; then
		say "the pair in $(dirname "$dir") lets anyone in without a password (made before" \
			"passwords): making it anew with the password of $(secret_file pg-replication)"
		stop 1
		stop 2
		node 1
		pg_remove "$(dirname "$dir")"
	fi
	init_primary
	node 1
	running || group="$default"
	node 2
	running || group="$group $default"
	node 1
	if running; then n1=$(sed -n 4p "$data/postmaster.pid"); else
		n1=$(choose_port pg-replication node1 25434 3 REPL_PORT1 "$group")
	fi
	ports_set pg-replication node1 "$n1"
	node 2
	if running; then n2=$(sed -n 4p "$data/postmaster.pid"); else
		n2=$(choose_port pg-replication node2 25435 4 REPL_PORT2 "$group" "$n1")
	fi
	ports_set pg-replication node2 "$n2"
	node 1
	moving=yes launch "$n2"
	n1=$port
	if ! "$bin/psql" -X -h 127.0.0.1 -p "$port" -U postgres -d postgres -tAc \
		"SELECT 1 FROM pg_roles WHERE rolname = '$ctl_user'" | grep -q 1; then
		"$bin/psql" -X -h 127.0.0.1 -p "$port" -U postgres -d postgres -qc \
			"CREATE ROLE $ctl_user SUPERUSER LOGIN PASSWORD '$PGPASSWORD'"
	fi
	if ! sql "SELECT 1 FROM pg_database WHERE datname = '$db'" | grep -q 1; then
		sql "CREATE DATABASE $db"
	fi
	node 2
	[ -f "$data/PG_VERSION" ] || basebackup 2
	moving=yes launch "$n1"
	set_mode "$mode"
}

# primary: sets the variables of the node that is not in recovery.
primary() {
	node 1
	if running && ! in_recovery; then return; fi
	node 2
	if running && ! in_recovery; then return; fi
	die "no node runs as a primary"
}

set_mode() {
	local names=""
	primary
	[ "$1" = sync ] && names="node$other"
	set_conf synchronous_standby_names "$names"
	say "primary is node$n, ${1}hronous (synchronous_standby_names = '$names')"
	node "$other"
	if running && in_recovery && [ ! -f "$dir/receiver-stopped" ]; then
		wait_until "node$n streaming" streaming
	fi
}

promote() {
	standby "${1:-}"
	say "promoting"
	as_owner "$bin/pg_ctl" -D "$data" -w -t 60 promote >/dev/null
	wait_until "accepting writes" writable
	say "primary now; timeline $(timeline)"
}

stop() {
	node "$1"
	running || return 0
	say "stopping"
	as_owner "$bin/pg_ctl" -D "$data" -m fast -w -t 60 stop >/dev/null
}

kill_node() {
	node "$1"
	local pid children c
	running || die "not running"
	pid=$(sed -n 1p "$data/postmaster.pid")
	children=$(pgrep -P "$pid" || true)
	say "SIGKILL to postmaster $pid"
	kill -KILL "$pid"
	for c in $children; do
		# Children exit once they notice the postmaster is gone; shared memory is free after that.
		for _ in $(seq 1 100); do kill -0 "$c" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$c" 2>/dev/null || true
	done
	# Nothing of the server is left: its pid file would only make pg_ctl start warn.
	as_owner rm -f "$data/postmaster.pid"
}

isolate() {
	node "$1"
	running || die "not running"
	as_owner tee "$data/pg_hba.conf" >/dev/null <<EOF
# isolated by scripts/pg-replication.sh: only the script itself gets in
host all $ctl_user 127.0.0.1/32 scram-sha-256
host all all 127.0.0.1/32 reject
host replication all 127.0.0.1/32 reject
EOF
	sql 'SELECT pg_reload_conf()' >/dev/null
	as_owner touch "$dir/isolated"
	# Cut this node's replication, whichever side of it the node is on.
	sql "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE backend_type = 'walsender'" >/dev/null
	if in_recovery; then
		receiver_stop "$n"
	fi
	say "isolated: new connections are refused, replication is cut"
}

heal() {
	node "$1"
	running || die "not running"
	[ -f "$dir/isolated" ] || return 0
	as_owner cp "$dir/pg_hba.conf.open" "$data/pg_hba.conf"
	sql 'SELECT pg_reload_conf()' >/dev/null
	as_owner rm -f "$dir/isolated"
	if in_recovery; then
		receiver_start "$n"
	fi
	say "healed"
}

# standby [NODE]: sets the variables of NODE, else of the running standby.
standby() {
	if [ -n "${1:-}" ]; then node "$1"; else
		node 2
		is_standby || node 1
	fi
	is_standby || die "node$n is not a running standby"
}

is_standby() { running && in_recovery; }

receiver_stop() {
	standby "${1:-}"
	set_conf primary_conninfo ''
	as_owner touch "$dir/receiver-stopped"
	wait_until "WAL receiver stopped" receiver_gone
	say "WAL receiver stopped"
}

receiver_start() {
	standby "${1:-}"
	as_owner rm -f "$dir/receiver-stopped"
	set_conf primary_conninfo "$(conninfo "$other")"
	wait_until "streaming from node$other" streaming
	say "WAL receiver streaming from node$other"
}

rebuild() {
	node "$1"
	local me_n=$n
	node "$other"
	if ! running || in_recovery; then die "node$n (the source) is not a running primary"; fi
	# Its data is about to be replaced: no shutdown checkpoint to wait for.
	node "$me_n"
	if running; then
		say "stopping (immediate)"
		as_owner "$bin/pg_ctl" -D "$data" -m immediate -w -t 60 stop >/dev/null
	fi
	basebackup "$me_n"
	launch
	wait_until "streaming from node$other" streaming
	say "standby of node$other again"
}

status() {
	local i role
	for i in 1 2; do
		node "$i"
		if ! running; then
			echo "node$i: stopped (port $port)"
			continue
		fi
		role=primary
		in_recovery && role="standby, receiver $(sql "SELECT coalesce((SELECT status FROM pg_stat_wal_receiver), 'stopped')")"
		[ -f "$dir/isolated" ] && role="$role, isolated"
		echo "node$i: $role, timeline $(timeline), port $port"
	done
}

down() {
	local i
	for i in 1 2; do stop "$i"; done
	[ "${1:-}" = --purge ] || return 0
	node 1
	pg_remove "$(dirname "$dir")"
	rm -rf "$root/.services/pg-replication"
	rm -f "$(ports_file pg-replication)" "$(secret_file pg-replication)"
	pg_purge_outside
}

print_env() {
	local p1 p2 pw
	p1=$(ports_get pg-replication node1)
	p2=$(ports_get pg-replication node2)
	pw=$(secret_get pg-replication)
	if [ -z "$p1" ] || [ -z "$p2" ] || [ -z "$pw" ]; then die "not set up in $root: run scripts/pg-replication.sh up"; fi
	echo "export TEST_REPL_NODE1_URL='postgres://postgres:$pw@127.0.0.1:$p1/$db?sslmode=disable'"
	echo "export TEST_REPL_NODE2_URL='postgres://postgres:$pw@127.0.0.1:$p2/$db?sslmode=disable'"
	echo "export TEST_REPL_URL='postgres://postgres:$pw@127.0.0.1:$p1,127.0.0.1:$p2/$db?sslmode=disable&target_session_attrs=read-write&connect_timeout=10'"
	printf 'export TEST_REPL_CTL=%q\n' "$self"
	# The script finds this pair again only with the same REPL_DIR.
	[ -z "${REPL_DIR:-}" ] || printf 'export REPL_DIR=%q\n' "$root"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
env)
	print_env
	exit
	;;
up | down | status | mode | promote | stop | kill | start | isolate | heal | receiver-stop | receiver-start | rebuild) ;;
*)
	echo "usage: $0 up [async|sync]|down [--purge]|env|status|mode async|sync|promote [NODE]|stop NODE|kill NODE|start NODE|isolate NODE|heal NODE|receiver-stop [NODE]|receiver-start [NODE]|rebuild NODE" >&2
	exit 2
	;;
esac
pg_find_bin pg_basebackup
[ "$cmd" = status ] || service_lock pg-replication
case "$cmd" in
# Under the lock: two commands at once must agree on the password.
up) PGPASSWORD=$(secret pg-replication) ;;
*) PGPASSWORD=$(secret_get pg-replication) ;;
esac
export PGPASSWORD
case "$cmd" in
up) up "$@" ;;
down) down "$@" ;;
status) status ;;
mode) set_mode "${1:?mode async|sync}" ;;
promote) promote "$@" ;;
stop) stop "${1:?stop NODE}" ;;
kill) kill_node "${1:?kill NODE}" ;;
start)
	node "${1:?start NODE}"
	launch
	;;
isolate) isolate "${1:?isolate NODE}" ;;
heal) heal "${1:?heal NODE}" ;;
receiver-stop) receiver_stop "$@" ;;
receiver-start) receiver_start "$@" ;;
rebuild) rebuild "${1:?rebuild NODE}" ;;
esac
