package inventory

import (
	"context"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/approach"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
)

// inventoryEtcd runs the store as naive-lock does, with the rows' locks
// taken with etcd's concurrency.Mutex: etcd-lock writes without a token, and
// a holder that pauses past its session's lease writes a stock computed
// from what it read before another holder sold; etcd-fenced reads and
// writes each row with its mutex key's CreateRevision as the token of
// lockfree's fence, which refuses that holder's write.
type inventoryEtcd struct{ approach.EtcdLib }

func init() {
	for _, l := range approach.EtcdLibs {
		engine.RegisterApproach(inventoryEtcd{l})
	}
}

func (inventoryEtcd) Scenario() string { return "inventory" }
func (d inventoryEtcd) Label() string {
	return d.Describe("the row's (a basket: its rows')", "SELECT → check → UPDATE")
}

// CommitsTransactions: etcd-fenced's basket writes each row fenced by its
// token, in one transaction (inventoryLockedOps.basket).
func (inventoryEtcd) CommitsTransactions() {}

// SkipFault: etcd-lock's basket is one statement, in autocommit.
func (d inventoryEtcd) SkipFault(f engine.Fault) string {
	if f == engine.LostCommit && !d.Fenced() {
		return engine.NoCommitOfItsOwn
	}
	return d.EtcdLib.SkipFault(f)
}

func (d inventoryEtcd) NewClient(ctx context.Context, env *engine.Env) (engine.Client, error) {
	conn, err := approach.ConnectEtcd(ctx, env)
	if err != nil {
		return nil, err
	}
	fenced := d.Fenced()
	return &inventoryEtcdClient{
		inventoryClient: newInventoryClient(env, inventoryLockedOps{
			env: env, point: d.Point("inventory"),
			lock: func(ctx context.Context, rows []string, fn func([]int64) error) error {
				return etcdLockEach(ctx, conn, sortedRows(rows), nil, fenced, fn)
			},
			writeContext: approach.WriteContext,
		}),
		conn: conn,
	}, nil
}

// etcdLockEach runs fn holding the etcd locks of rows, taken one after
// another, with their tokens when fenced (nil otherwise).
func etcdLockEach(ctx context.Context, c *approach.EtcdConn, rows []string, tokens []int64, fenced bool, fn func([]int64) error) error {
	if len(rows) == 0 {
		if !fenced {
			tokens = nil
		}
		return fn(tokens)
	}
	return approach.WithEtcdLock(ctx, c, rows[0], func(token int64) error {
		return etcdLockEach(ctx, c, rows[1:], append(tokens, token), fenced, fn)
	})
}

type inventoryEtcdClient struct {
	*inventoryClient
	conn *approach.EtcdConn
}

func (c *inventoryEtcdClient) Close() error { return c.conn.Close() }
