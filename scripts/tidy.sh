#!/usr/bin/env bash
# Runs `go mod tidy` in each of the repository's modules; --check fails when
# that would change a go.mod or go.sum.
#
# The lab (cmd/lockfree) and the examples require the library
# (github.com/lockfree-go/lockfree) at a placeholder version, which go.work
# replaces by this checkout. `go mod tidy` ignores go.work, so for those two
# modules it runs with a temporary replace of the library by the checkout,
# removed afterwards: their go.mod never carries a replace directive, so that
# `go install github.com/lockfree-go/lockfree/cmd/lockfree@<version>` works
# once the library is published at the version they require.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
lib=github.com/lockfree-go/lockfree
check=false
[ "${1:-}" = --check ] && check=true

tidy() { # dir [replace-target]
	local dir=$1 rel=${2:-}
	(
		cd "$root/$dir"
		$check && cp go.mod go.mod.orig && cp go.sum go.sum.orig
		if [ -n "$rel" ]; then
			go mod edit -replace "$lib=$rel"
			trap 'go mod edit -dropreplace '"$lib" EXIT
		fi
		GOWORK=off GOFLAGS=-mod=mod go mod tidy
		if [ -n "$rel" ]; then go mod edit -dropreplace "$lib"; trap - EXIT; fi
		if $check; then
			status=0
			cmp -s go.mod go.mod.orig && cmp -s go.sum go.sum.orig || status=1
			mv go.mod.orig go.mod && mv go.sum.orig go.sum
			[ $status = 0 ] || { echo "tidy.sh: go mod tidy changes $dir/go.mod or go.sum" >&2; exit 1; }
		fi
	)
}

tidy .
tidy cmd/lockfree ../..
tidy examples ..
