package engine_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/report"
	"github.com/lockfree-go/lockfree/internal/testdb"
)

// A run of the events scenario with no Kafka brokers, or brokers that do
// not answer, reports the approaches that consume from Kafka as skipped,
// with the reason, and runs the others: never silently missing, never a
// failed run.
func TestKafkaSkipped(t *testing.T) {
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := dead.Addr().String()
	dead.Close() // nothing listens there now
	url := testdb.New(t).URL
	sc, _ := engine.Lookup("events")
	for _, tc := range []struct {
		kafka []string
		why   string
	}{
		{nil, "no Kafka brokers"},
		{[]string{addr}, "does not answer"},
	} {
		rep, err := engine.Run(context.Background(), sc, engine.Config{Clients: 1, Duration: 200 * time.Millisecond,
			Approaches: []engine.Approach{engine.Alternative, engine.FencedLock, engine.Raw}}, engine.Infra{URL: url, Kafka: tc.kafka})
		if err != nil {
			t.Fatalf("kafka %v: %v", tc.kafka, err)
		}
		got := map[engine.Approach]report.Result{}
		for _, r := range rep.Results {
			got[r.Approach] = r
		}
		for _, a := range []engine.Approach{engine.Alternative, engine.FencedLock} {
			if r, ok := got[a]; !ok || !strings.Contains(r.Skipped, tc.why) || r.Label == "" {
				t.Errorf("kafka %v: %s: %+v, want it skipped because %s, with its label", tc.kafka, a, r, tc.why)
			}
		}
		if r := got[engine.Raw]; r.Skipped != "" || r.Ops == 0 {
			t.Errorf("kafka %v: raw did not run beside the skipped approaches: %+v", tc.kafka, r)
		}
	}
}
