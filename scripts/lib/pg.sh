# shellcheck shell=bash disable=SC2154 # root comes from the caller
# Sourced by postgres.sh and pg-replication.sh after service.sh: where PostgreSQL's data goes,
# its binaries, and running them as the data's owner.
#
# initdb and postgres refuse to run as root, so as root they run as the `postgres` user (created
# when missing). The data then stays in the checkout's .services/ when postgres can enter that
# folder (checked as postgres, not as root); otherwise, as in a private home folder, it goes to
# /var/lib/postgresql/lockfree-<hash of the checkout's path>/, which belongs to postgres: nothing
# in the user's folders is chmod-ed, and several checkouts do not share data.

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

# pg_make_dir DIR: makes DIR for a cluster; as root owned by postgres, after pg_user, with DIR
# from pg_base.
pg_make_dir() {
	local dir=$1
	if ! is_root; then
		mkdir -p "$dir"
		return
	fi
	if [ "${dir#"$pg_outside"/}" != "$dir" ] && [ ! -d "$pg_outside" ]; then
		[ -d /var/lib/postgresql ] || install -d -o postgres -g postgres -m 0755 /var/lib/postgresql
		install -d -o postgres -g postgres -m 0700 "$pg_outside"
		echo "$root" >"$pg_outside/checkout"
		say "postgres cannot enter $root/.services, so the data goes to $pg_outside" \
			"(scripts/${0##*/} down --purge deletes it)"
	fi
	install -d -o postgres -g postgres -m 0700 "$dir"
	as_postgres test -w "$dir" || die "postgres cannot write to $dir"
}

# pg_purge_outside deletes this checkout's folder under /var/lib/postgresql once no cluster is
# left in it.
pg_purge_outside() {
	[ -d "$pg_outside" ] || return 0
	[ -z "$(find "$pg_outside" -mindepth 1 -maxdepth 1 ! -name checkout)" ] || return 0
	say "deleting $pg_outside"
	rm -rf "$pg_outside"
}
