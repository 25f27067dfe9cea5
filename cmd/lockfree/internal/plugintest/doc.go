// Package plugintest holds the test that proves the engine runs a scenario
// it was never told of: its test package registers a small counter scenario
// of its own, with an alternative and a naive lock, and runs it through the
// engine under the pause fault (plugin_test.go). It has no code of its own.
package plugintest
