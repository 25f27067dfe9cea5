package engine

import (
	"context"
	"sync/atomic"

	"github.com/lockfree-go/lockfree/internal/faultproxy"
)

// LostReply loses the answer to a worker's next statement (or, for an
// approach whose workers commit transactions of their own, its next
// COMMIT): its proxy forwards the request, the server acts on it, and the
// worker's connection is reset before the answer reaches it. A client that
// resends the operation (Env.Resend) must find it applied once; one that
// cannot know reports it as uncertain, never as done. The lock service's
// statements cross the same proxy: a grant, renewal or release whose
// answer was lost is uncertain evidence (recordingLocks), and the lock
// service's client sends it again. On an Aimer, every other one loses the
// answer after its aim point (loseAimed).
const LostReply Fault = "lost-reply"

type lostReply struct{}

func (lostReply) Name() Fault { return LostReply }
func (lostReply) How() string {
	return "statements (COMMITs where the approach commits its own) whose answer was lost: forwarded, acted on, the connection reset before the answer came; a client with an operation ID resends, as does the lock service's client its grants and releases"
}
func (lostReply) counts() string        { return "the proxy lost an answer" }
func (lostReply) networked()            {}
func (lostReply) start(r *run) injector { return &lostReplyRun{r: r} }

type lostReplyRun struct {
	r *run
	n atomic.Int64 // injections aimed or not (loseAimed)
}

func (l *lostReplyRun) inject(ctx context.Context, v *proc) {
	if _, ok := l.r.def.(Committer); ok {
		loseAimed(ctx, l.r, v, LostReply, &l.n, faultproxy.PostgresCommit, "a COMMIT")
		return
	}
	loseAimed(ctx, l.r, v, LostReply, &l.n, faultproxy.PostgresExecute, "a statement")
}
