#!/usr/bin/env bash
# Runs `go mod tidy` in each of the repository's modules; --check fails when
# that would change a go.mod or go.sum.
#
# The lab (cmd/lockfree) and the examples require the library
# (github.com/lockfree-go/lockfree) at a placeholder version, which go.work
# replaces by this checkout; the examples require the lab too (its
# lockfreetest package, in their tests), the same way. `go mod tidy` ignores
# go.work, so for those two modules it runs with temporary replaces by the
# checkout, removed afterwards: their go.mod never carries a replace
# directive, so that `go install github.com/lockfree-go/lockfree/cmd/lockfree@<version>`
# works once the library is published at the version they require.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
lib=github.com/lockfree-go/lockfree
lab=$lib/cmd/lockfree
check=false
[ "${1:-}" = --check ] && check=true

tidy() { # dir [module=replace-target …]
	local dir=$1
	shift
	(
		cd "$root/$dir"
		$check && cp go.mod go.mod.orig && cp go.sum go.sum.orig
		local r drop=()
		for r in "$@"; do drop+=(-dropreplace "${r%%=*}"); done
		if [ $# -gt 0 ]; then
			for r in "$@"; do go mod edit -replace "$r"; done
			trap 'go mod edit '"${drop[*]}" EXIT
		fi
		GOWORK=off GOFLAGS=-mod=mod go mod tidy
		if [ $# -gt 0 ]; then go mod edit "${drop[@]}"; trap - EXIT; fi
		if $check; then
			status=0
			cmp -s go.mod go.mod.orig && cmp -s go.sum go.sum.orig || status=1
			mv go.mod.orig go.mod && mv go.sum.orig go.sum
			[ $status = 0 ] || { echo "tidy.sh: go mod tidy changes $dir/go.mod or go.sum" >&2; exit 1; }
		fi
	)
}

tidy .
tidy cmd/lockfree "$lib=../.."
tidy examples "$lib=.." "$lab=../cmd/lockfree"
