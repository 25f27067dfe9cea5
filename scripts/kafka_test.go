package scripts_test

import (
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// kafkaStartTimeout is how long, in seconds, TestKafkaPortsTaken lets its
// broker take to answer.
const kafkaStartTimeout = 300

// TestKafkaPortsTaken: a checkout whose remembered broker port another
// process listens on, and whose remembered controller port another process
// bound after the probe, starts Kafka on free ports (it used to stop with
// "set KAFKA_PORT to a free port", as if the user had set it).
func TestKafkaPortsTaken(t *testing.T) {
	t.Parallel()
	for _, prog := range []string{"java", "mvn"} {
		if _, err := exec.LookPath(prog); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is not installed: scripts/kafka.sh needs it", prog)
			}
			t.Skipf("%s is not installed: scripts/kafka.sh needs it", prog)
		}
	}
	root := checkout(t)
	t.Cleanup(func() { script(root, "", nil, "kafka.sh", "down", "--purge") })
	taken, bound := holdListening(t), holdBound(t)
	remember(t, root, "kafka", map[string]int{"broker": taken, "controller": bound})
	// The broker starts twice (its first JVM fails to bind), beside the
	// checkout's own broker: on a loaded 2-core machine a start can outlast
	// kafka.sh's default 120 s, which says nothing about the ports.
	_, errOut, err := script(root, "", []string{"KAFKA_START_TIMEOUT=" + strconv.Itoa(kafkaStartTimeout)}, "kafka.sh", "up")
	if err != nil && strings.Contains(errOut, "did not answer") {
		t.Fatalf("kafka.sh up: the broker did not answer within KAFKA_START_TIMEOUT=%d s; "+
			"the machine is too loaded to start a second broker (the ports were chosen):\n%s", kafkaStartTimeout, errOut)
	}
	if err != nil {
		t.Fatalf("kafka.sh up with its remembered ports taken: %v\n%s", err, errOut)
	}
	t.Logf("kafka.sh up:\n%s", errOut)
	if !strings.Contains(errOut, "meanwhile") {
		t.Errorf("kafka.sh up did not say it moved the port taken meanwhile:\n%s", errOut)
	}
	brokers := exports(t, mustScript(t, root, "", "kafka.sh", "env"))["TEST_KAFKA_BROKERS"]
	got := rememberedPorts(t, root, "kafka")
	if got["broker"] == taken || got["controller"] == bound || brokers != "127.0.0.1:"+strconv.Itoa(got["broker"]) {
		t.Fatalf("ports %v, TEST_KAFKA_BROKERS=%s; another process holds %d and %d", got, brokers, taken, bound)
	}
	c, err := net.DialTimeout("tcp", brokers, 10*time.Second)
	if err != nil {
		t.Fatalf("the broker at %s: %v", brokers, err)
	}
	c.Close()
}
