//go:build !race

package lockfreetest_test

const raceEnabled = false
