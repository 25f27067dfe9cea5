package singleton

import (
	"context"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/approach"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
)

// singletonEtcd takes the job's lock with etcd's concurrency.Mutex for each
// run: etcd-lock as the naive leader's flow (SELECT the oldest open period →
// closing written), and a holder paused past its session's lease closes a
// period another holder closes too; etcd-fenced reads and closes with the
// mutex key's CreateRevision as the token of lockfree's fence, which
// refuses that holder's closing.
type singletonEtcd struct{ approach.EtcdLib }

func init() {
	for _, l := range approach.EtcdLibs {
		engine.RegisterApproach(singletonEtcd{l})
	}
}

func (singletonEtcd) Scenario() string { return "singleton" }
func (d singletonEtcd) Label() string {
	return d.Describe("the job's", "SELECT oldest open period → closing written")
}

func (d singletonEtcd) NewClient(ctx context.Context, env *engine.Env) (engine.Client, error) {
	j, err := newJobs(ctx, env)
	if err != nil {
		return nil, err
	}
	conn, err := approach.ConnectEtcd(ctx, env)
	if err != nil {
		return nil, err
	}
	return &singletonEtcdClient{jobs: j, conn: conn, fenced: d.Fenced(), point: d.Point("singleton")}, nil
}

type singletonEtcdClient struct {
	jobs
	conn   *approach.EtcdConn
	fenced bool
	point  string
}

func (c *singletonEtcdClient) Op(ctx context.Context) error {
	ctx, op, err := c.invoke(ctx, c.pick())
	if err != nil {
		return err
	}
	var recorded bool
	err = approach.WithEtcdLock(ctx, c.conn, op.Key(), func(token int64) error {
		recorded = true
		s := steps{point: c.point,
			read: func(ctx context.Context) (int64, error) { return c.next(ctx, op) },
			write: func(ctx context.Context, p int64) (bool, error) {
				wctx, cancel := approach.WriteContext(ctx)
				defer cancel()
				return true, c.plainClose(wctx, op, p, 0)
			}}
		if c.fenced {
			s.read = func(ctx context.Context) (int64, error) { return c.fencedNext(ctx, op, token) }
			s.write = func(ctx context.Context, p int64) (bool, error) { return true, c.fencedClose(ctx, op, p, token) }
		}
		return c.run(ctx, op, s)
	})
	if !recorded {
		return op.Finish(nil, err)
	}
	return nil
}

func (c *singletonEtcdClient) Close() error { return c.conn.Close() }
