// Package codecheck holds tests of the repository's code as a whole, not
// of one package: the library's module imports nothing of the lab's, its
// go.mod requires none of the lab's modules, and no function of any module
// is longer than the conventions allow. It has no code of its own; `make
// lint` and `make test` run its tests.
package codecheck
