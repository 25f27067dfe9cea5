# shellcheck shell=bash
# Sourced by the service scripts in scripts/ (postgres.sh, kafka.sh, …): messages,
# prerequisites, and the ports each checkout remembers.
#
# The caller sets `root` (the checkout) and `me` (its name in messages) first.
#
# Ports: a service prefers its default ports. When one of them is taken by a process that is not
# this checkout's server, the service moves to this checkout's own block of ports: 50 ports at
# 20000 + 50*k, k from a hash of the checkout's path (the next block when those are taken too).
# So two checkouts run side by side, each always on the same ports, and a checkout whose server
# is stopped for a moment (the fault tests do it) does not lose its port to another checkout's
# `up`. The ports in use are remembered in .services/<service>.ports so that up, env and down
# agree. Offsets in a block: postgres 0-1, redis 2, postgres replication 3-4, kafka 10-29.
# A remembered port that another process took since is moved like a default one; a start whose
# bind fails because the port was taken meanwhile (two checkouts starting at once) moves on to
# the next free port (move_port).
#
# Passwords: each server that takes one has a random password kept in .services/<service>.password,
# mode 0600, readable by the user who ran `up` alone (secret).

: "${root:?the caller sets root}" "${me:?the caller sets me}"

# say MESSAGE…: one line on stderr for humans (stdout is for `env`).
say() { printf '%s: %s\n' "$me" "$*" >&2; }
die() {
	say "$*"
	exit 1
}

# need COMMAND PACKAGE: COMMAND is on PATH, or one line says which Debian package provides it.
need() {
	command -v "$1" >/dev/null 2>&1 || die "$1 not found: apt-get install $2"
}

is_root() { [ "$(id -u)" = 0 ]; }

# checkout_hash: a short, stable name for this checkout, from its path.
checkout_hash() { printf '%s' "$root" | sha256sum | cut -c1-12; }

# port_taken PORT: some process listens on PORT (on any address) or accepts on 127.0.0.1:PORT.
port_taken() {
	if command -v ss >/dev/null 2>&1 && [ -n "$(ss -Hltn "sport = :$1" 2>/dev/null)" ]; then
		return 0
	fi
	timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null
}

# port_holder PORT: "by NAME (pid N)" when ss can tell who listens on PORT, else nothing.
port_holder() {
	command -v ss >/dev/null 2>&1 || return 0
	ss -Hltnp "sport = :$1" 2>/dev/null |
		sed -n 's/.*users:(("\([^"]*\)",pid=\([0-9]*\).*/ by \1 (pid \2)/p' | head -n 1
}

# block_port OFFSET [EXCLUDE…]: the first port at OFFSET in this checkout's block, or in the
# blocks after it, that nothing holds and that is not among EXCLUDE.
block_port() {
	local offset=$1 k p i
	shift
	k=$((16#$(checkout_hash | cut -c1-6) % 200))
	for i in $(seq 0 199); do
		p=$((20000 + 50 * ((k + i) % 200) + offset))
		case " $* " in *" $p "*) continue ;; esac
		port_taken "$p" || {
			echo "$p"
			return 0
		}
	done
	die "no free port at offset $offset in 20000-29999"
}

# services_dir: the checkout's .services folder exists and is a folder, not a symbolic link.
services_dir() {
	local d=$root/.services
	[ ! -L "$d" ] || die "$d is a symbolic link: refusing it (remove it; the scripts make the folder)"
	mkdir -p "$d"
}

# secret_file SERVICE: where the password of this checkout's SERVICE is kept.
secret_file() { echo "$root/.services/$1.password"; }

# secret SERVICE: prints the password of this checkout's SERVICE, kept in
# .services/SERVICE.password (made at random the first time, mode 0600). A file that is a link,
# belongs to another user or that others may read is refused: the password would not be ours.
secret() {
	local f
	f=$(secret_file "$1")
	services_dir
	if [ ! -e "$f" ] && [ ! -L "$f" ]; then
		(
			umask 077
			set -o noclobber
			od -An -tx1 -N24 /dev/urandom | tr -d ' \n' >"$f.$$" && echo >>"$f.$$"
		) || die "cannot write $f.$$"
		mv -f "$f.$$" "$f"
	fi
	secret_check "$f"
	head -n 1 "$f"
}

# secret_get SERVICE: the password kept for SERVICE, or nothing when there is none yet.
secret_get() {
	local f
	f=$(secret_file "$1")
	[ -e "$f" ] || [ -L "$f" ] || return 0
	secret_check "$f"
	head -n 1 "$f"
}

secret_check() {
	local f=$1 owner mode
	[ ! -L "$1" ] && [ -f "$f" ] || die "$f is not a regular file: refusing it"
	read -r owner mode < <(stat -c '%u %a' "$f")
	[ "$owner" = "$(id -u)" ] || die "$f belongs to uid $owner, not to us: refusing it"
	[ "$mode" = 600 ] || die "$f has mode $mode, not 600: refusing it (others may have read it)"
	[ -n "$(head -n 1 "$f")" ] || die "$f is empty"
}

# ports_file SERVICE: where this checkout remembers the service's ports.
ports_file() { echo "$root/.services/$1.ports"; }

# ports_get SERVICE NAME: the remembered port NAME of SERVICE, or nothing.
ports_get() {
	local f
	f=$(ports_file "$1")
	[ -f "$f" ] || return 0
	sed -n "s/^$2=\([0-9][0-9]*\)$/\1/p" "$f" | tail -n 1
}

# ports_set SERVICE NAME PORT: remember port NAME of SERVICE.
ports_set() {
	local f
	f=$(ports_file "$1")
	services_dir
	{
		[ -f "$f" ] && grep -v "^$2=" "$f"
		echo "$2=$3"
	} >"$f.tmp" || true
	mv "$f.tmp" "$f"
}

# service_lock NAME: serialise this checkout's commands that change service NAME (e.g. two
# `make test` at once). The lock is fd 9: servers started while holding it must get `9>&-`.
service_lock() {
	services_dir
	command -v flock >/dev/null 2>&1 || return 0
	exec 9>"$root/.services/$1.lock"
	flock -w 300 9 || die "another command holds $root/.services/$1.lock"
}

# choose_port SERVICE NAME DEFAULT OFFSET VAR "DEFAULTS" [EXCLUDE…]: prints and remembers the port
# for NAME of a server of SERVICE that is not running. VAR (e.g. PGPORT_LOCKFREE), when set, is
# the port, and it must be free. Otherwise the remembered port while it is free; else DEFAULT when
# none of the service's DEFAULTS is taken; else a port of this checkout's block, never one of
# EXCLUDE (ports already chosen for the service's other servers).
choose_port() {
	local service=$1 name=$2 default=$3 offset=$4 var=$5 group=$6 p d
	shift 6
	if [ -n "${!var:-}" ]; then
		p=${!var}
		[[ $p =~ ^[0-9]+$ ]] || die "$var=$p is not a port"
		if port_taken "$p"; then
			die "port $p ($var) is taken$(port_holder "$p"); set $var to a free port"
		fi
	else
		p=$(ports_get "$service" "$name")
		if [ -n "$p" ] && port_taken "$p"; then
			d=$p
			p=$(block_port "$offset" "$d" "$@")
			say "port $d of $name is taken$(port_holder "$d"); using $p" \
				"(set $var to choose)"
		elif [ -z "$p" ]; then
			p=$default
			for d in $group; do
				port_taken "$d" || continue
				p=$(block_port "$offset" "$@")
				say "default port $d is taken$(port_holder "$d"); $name uses port $p," \
					"this checkout's own (set $var to choose)"
				break
			done
		fi
	fi
	ports_set "$service" "$name" "$p"
	echo "$p"
}

# move_port SERVICE NAME OFFSET VAR FAILED [EXCLUDE…]: a server of SERVICE could not bind port
# FAILED of NAME because another process took it after it was chosen (two checkouts starting at
# once see the same free port). Prints and remembers the next free port of this checkout's block,
# never FAILED or one of EXCLUDE. A port the user set (VAR) is not moved.
move_port() {
	local service=$1 name=$2 offset=$3 var=$4 failed=$5 p
	shift 5
	if [ -n "${!var:-}" ]; then
		die "port $failed ($var) was taken by another process meanwhile; set $var to a free port"
	fi
	p=$(block_port "$offset" "$failed" "$@")
	say "port $failed of $name was taken by another process meanwhile; using $p (set $var to choose)"
	ports_set "$service" "$name" "$p"
	echo "$p"
}

# log_size FILE: FILE's size in bytes (0 when it does not exist), to read what is written after.
log_size() { stat -c %s "$1" 2>/dev/null || echo 0; }

# bind_failed FILE [FROM]: what FILE got after byte FROM says a bind found its address in use.
# grep reads to the end (no -q): under pipefail, a grep that quits at its first match would kill
# tail with SIGPIPE on a log longer than a pipe's buffer, and the pipeline would say no match.
bind_failed() { tail -c +$((${2:-0} + 1)) "$1" 2>/dev/null | grep 'Address already in use' >/dev/null; }
