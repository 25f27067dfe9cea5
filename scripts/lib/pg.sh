# shellcheck shell=bash disable=SC2154 # root comes from the caller
# Sourced by postgres.sh and pg-replication.sh after service.sh: where PostgreSQL's data goes,
# its binaries, running them as the data's owner, and their password.
#
# initdb and postgres refuse to run as root, so as root they run as the `postgres` user (created
# when missing). The data then stays in the checkout's .services/ when postgres can enter that
# folder (checked as postgres, not as root); otherwise, as in a private home folder, it goes to
# /var/lib/postgresql/lockfree-<hash of the checkout's path>/, which belongs to postgres: nothing
# in the user's folders is chmod-ed, and several checkouts do not share data.
#
# Root never writes into a folder that postgres owns: postgres makes its folders and writes its
# files there itself (as_owner), so a link it planted leads nowhere it could not write anyway.
# A service folder that is a symbolic link, or belongs to another user, is refused.
#
# Authentication: scram-sha-256 on 127.0.0.1, no Unix socket; the superuser's password is in
# .services/<service>.password (secret, in service.sh).

pg_outside=/var/lib/postgresql/lockfree-$(checkout_hash)

# pg_base MARKER: the folder for this checkout's clusters. MARKER is a path, relative to it, that
# exists once a cluster was made: where it exists, the data stays.
pg_base() {
	local inside=$root/.services
	if ! is_root || [ -e "$inside/$1" ]; then
		echo "$inside"
	elif [ -e "$pg_outside/$1" ]; then
		echo "$pg_outside"
	elif id postgres >/dev/null 2>&1 && [ -d "$inside" ] && as_postgres test -x "$inside"; then
		echo "$inside"
	else
		echo "$pg_outside"
	fi
}

# pg_find_bin sets bin, the folder of initdb, pg_ctl, pg_isready, psql and the other programs
# (PG_BINDIR, else the folder initdb on PATH links to, else the newest of Debian's
# /usr/lib/postgresql/<version>/bin).
pg_find_bin() {
	local c
	if [ -n "${PG_BINDIR:-}" ]; then
		bin=$PG_BINDIR
	elif command -v initdb >/dev/null 2>&1; then
		bin=$(dirname "$(readlink -f "$(command -v initdb)")")
	else
		bin=
		for c in $(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -name bin 2>/dev/null | sort -V -r); do
			if [ -x "$c/initdb" ]; then
				bin=$c
				break
			fi
		done
	fi
	for c in initdb pg_ctl pg_isready psql "$@"; do
		[ -n "$bin" ] && [ -x "$bin/$c" ] && continue
		die "PostgreSQL's $c not found${PG_BINDIR:+ in PG_BINDIR=$PG_BINDIR}: apt-get install postgresql"
	done
}

as_postgres() { (cd / && runuser -u postgres -- "$@"); }

# as_owner runs a command as the data's owner: postgres when we are root.
as_owner() {
	if is_root; then
		as_postgres "$@"
	else
		"$@"
	fi
}

# pg_user: as root, the postgres user exists (made when missing).
pg_user() {
	is_root || return 0
	need runuser util-linux
	if ! id postgres >/dev/null 2>&1; then
		need useradd passwd
		useradd --system --home-dir /var/lib/postgresql --shell /bin/bash postgres
	fi
	mkdir -p "$root/.services"
}

# as_owner_to FILE COMMAND…: runs COMMAND as the data's owner, its output to FILE, which the
# owner opens.
as_owner_to() {
	local f=$1
	shift
	# shellcheck disable=SC2016 # the inner shell expands them
	as_owner bash -c 'f=$1; shift; exec "$@" >"$f" 2>&1' _ "$f" "$@"
}

# pg_refuse_link PATH: PATH is not a symbolic link.
pg_refuse_link() {
	[ ! -L "$1" ] || die "$1 is a symbolic link (to $(readlink "$1")): refusing it;" \
		"remove it, or run scripts/${0##*/} down --purge"
}

# pg_owned PATH USER: PATH is a folder of USER, not a link.
pg_owned() {
	local owner
	pg_refuse_link "$1"
	[ -d "$1" ] || die "$1 is not a folder: refusing it"
	owner=$(stat -c %U "$1")
	[ "$owner" = "$2" ] || die "$1 belongs to $owner, not $2: refusing it"
}

# pg_make_dir DIR: makes DIR for a cluster; as root owned by postgres, after pg_user, with DIR
# from pg_base.
pg_make_dir() {
	local dir=$1
	if ! is_root; then
		pg_refuse_link "$(dirname "$dir")"
		pg_refuse_link "$dir"
		mkdir -p "$dir"
		pg_refuse_links_in "$dir"
		return
	fi
	if [ "${dir#"$pg_outside"/}" != "$dir" ]; then
		if [ ! -e /var/lib/postgresql ] && [ ! -L /var/lib/postgresql ]; then
			install -d -o postgres -g postgres -m 0755 /var/lib/postgresql
		fi
		pg_owned /var/lib/postgresql postgres
		if [ ! -e "$pg_outside" ] && [ ! -L "$pg_outside" ]; then
			as_postgres mkdir -m 0700 "$pg_outside"
			echo "$root" | as_postgres tee "$pg_outside/checkout" >/dev/null
			say "postgres cannot enter $root/.services, so the data goes to $pg_outside" \
				"(scripts/${0##*/} down --purge deletes it)"
		fi
		pg_owned "$pg_outside" postgres
		pg_refuse_link "$(dirname "$dir")"
		pg_refuse_link "$dir"
		as_postgres mkdir -p -m 0700 "$dir"
	else
		# In .services, which is ours: postgres cannot plant anything in it.
		pg_refuse_link "$(dirname "$dir")"
		pg_refuse_link "$dir"
		mkdir -p "$(dirname "$dir")"
		install -d -o postgres -g postgres -m 0700 "$dir"
	fi
	pg_owned "$dir" postgres
	as_postgres test -w "$dir" || die "postgres cannot write to $dir"
	pg_refuse_links_in "$dir"
}

# pg_refuse_links_in DIR: DIR, a cluster's folder about to be filled, holds no symbolic link.
pg_refuse_links_in() {
	local links
	links=$(as_owner find "$1" -mindepth 1 -maxdepth 1 -type l | head -n 3)
	[ -z "$links" ] || die "$1 holds symbolic links ($(echo "$links" | paste -sd ' ')): refusing it;" \
		"remove them, or run scripts/${0##*/} down --purge"
}

# pg_check_dir DIR: DIR, a cluster's folder, and the folders above it up to the checkout's
# .services or $pg_outside are no links and, as root, belong to postgres where they should.
pg_check_dir() {
	local d=$1
	if is_root && [ "${d#"$pg_outside"/}" != "$d" ] && { [ -e "$pg_outside" ] || [ -L "$pg_outside" ]; }; then
		pg_owned "$pg_outside" postgres
	fi
	pg_refuse_link "$(dirname "$d")"
	[ -e "$d" ] || [ -L "$d" ] || return 0
	if is_root; then pg_owned "$d" postgres; else pg_refuse_link "$d"; fi
}

# pg_remove DIR: deletes DIR, a cluster's folder; inside a folder of postgres, as postgres.
pg_remove() {
	[ -e "$1" ] || [ -L "$1" ] || return 0
	if is_root && [ "${1#"$pg_outside"/}" != "$1" ]; then
		as_postgres rm -rf "$1"
	else
		rm -rf "$1"
	fi
}

# pg_purge_outside deletes this checkout's folder under /var/lib/postgresql once no cluster is
# left in it.
pg_purge_outside() {
	[ -e "$pg_outside" ] || [ -L "$pg_outside" ] || return 0
	if [ -L "$pg_outside" ]; then
		say "$pg_outside is a symbolic link: deleting the link alone"
		rm -f "$pg_outside"
		return
	fi
	[ -z "$(as_postgres find "$pg_outside" -mindepth 1 -maxdepth 1 ! -name checkout)" ] || return 0
	say "deleting $pg_outside"
	as_postgres rm -rf "$pg_outside"
}

# pg_initdb DATA PASSWORD LOG: makes a cluster in DATA whose superuser postgres has PASSWORD, with
# scram-sha-256 for every connection; initdb's output goes to LOG. The password reaches initdb in
# a file of the owner's, mode 0600, deleted afterwards.
pg_initdb() {
	local data=$1 password=$2 log=$3 pwfile
	pwfile=$(dirname "$data")/initdb.pw
	as_owner rm -f "$pwfile"
	printf '%s\n' "$password" | as_owner bash -c 'umask 077 && set -o noclobber && cat >"$1"' _ "$pwfile" ||
		die "cannot write $pwfile"
	if ! as_owner_to "$log" "$bin/initdb" -D "$data" -U postgres --auth=scram-sha-256 \
		--pwfile="$pwfile" -E UTF8 --locale=C.UTF-8; then
		as_owner rm -f "$pwfile"
		die "initdb failed: $(as_owner tail -n 1 "$log")"
	fi
	as_owner rm -f "$pwfile"
}

# pg_trusts DATA: the cluster in DATA lets some connection in without a password (made before
# passwords).
pg_trusts() { as_owner grep -Eq '^[^#]*[[:space:]]trust([[:space:]]|$)' "$1/pg_hba.conf"; }

# pg_log_size FILE and pg_bind_failed FILE FROM: log_size and bind_failed of service.sh for a log
# of the owner's, read as the owner (grep reads to the end, as in bind_failed).
pg_log_size() { as_owner stat -c %s "$1" 2>/dev/null || echo 0; }
pg_bind_failed() { as_owner tail -c +$(($2 + 1)) "$1" 2>/dev/null | grep 'Address already in use' >/dev/null; }
