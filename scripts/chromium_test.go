package scripts_test

import (
	"strings"
	"testing"
)

// TestChromium runs scripts/chromium.sh from a fresh copy: it prints the
// browser it finds (LOCKFREE_CHROMIUM first) and its env form, and refuses a
// LOCKFREE_CHROMIUM that is no program with one line that says what to do.
func TestChromium(t *testing.T) {
	root := checkout(t)
	out, errOut, err := script(root, "", []string{"LOCKFREE_CHROMIUM=/bin/true"}, "chromium.sh")
	if err != nil || strings.TrimSpace(out) != "/bin/true" {
		t.Errorf("chromium.sh = %q, %v (%s), want /bin/true", out, err, errOut)
	}
	out, errOut, err = script(root, "", []string{"LOCKFREE_CHROMIUM=/bin/true"}, "chromium.sh", "env")
	if err != nil || strings.TrimSpace(out) != "export LOCKFREE_CHROMIUM=/bin/true" {
		t.Errorf("chromium.sh env = %q, %v (%s)", out, err, errOut)
	}
	out, errOut, err = script(root, "", []string{"LOCKFREE_CHROMIUM=" + root + "/no-such-browser"}, "chromium.sh")
	if err == nil || out != "" || !strings.Contains(errOut, "apt-get install chromium") || strings.Count(errOut, "\n") != 1 {
		t.Errorf("a missing LOCKFREE_CHROMIUM: out %q, err %v, stderr %q; want a failure and one line saying how", out, err, errOut)
	}
}
