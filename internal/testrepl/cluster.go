package testrepl

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/lockfree-go/lockfree/internal/replpair"
)

// cluster is the binary's pair (internal/replpair) and the test that holds
// it.
type cluster struct {
	mu   sync.Mutex // held by the test that has the pair
	t    testing.TB // that test, for the script's messages
	pair *replpair.Pair
}

var (
	once      sync.Once
	shared    *cluster
	sharedErr error
)

func theCluster() (*cluster, error) {
	once.Do(func() { shared, sharedErr = newCluster() })
	return shared, sharedErr
}

// Main runs the tests of a binary that uses Get, then removes its pair.
func Main(m *testing.M) {
	code := m.Run()
	if shared != nil {
		if err := shared.pair.Remove(context.Background()); err != nil {
			fmt.Fprintf(os.Stderr, "testrepl: removing the replication pair: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}
	os.Exit(code)
}

func newCluster() (*cluster, error) {
	c := &cluster{}
	pair, err := replpair.Start(context.Background())
	if pair != nil {
		c.pair = pair
		pair.Logf = c.logf
	}
	if err != nil {
		return c, err
	}
	return c, nil
}

// logf logs to the test holding the pair, if any (Main removes the pair
// after every test has ended).
func (c *cluster) logf(format string, args ...any) {
	if c.t == nil {
		return
	}
	c.t.Helper()
	c.t.Logf(format, args...)
}

func (c *cluster) restore() error { return c.pair.Restore(context.Background()) }
func (c *cluster) remake() error  { return c.pair.Remake(context.Background()) }
