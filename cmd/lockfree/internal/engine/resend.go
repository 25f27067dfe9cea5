package engine

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
)

// The backoff between the sends of Env.Resend, as a client's: the first
// wait, its cap, and the bound on the sends of one operation.
const (
	resendFirst = 10 * time.Millisecond
	resendCap   = 200 * time.Millisecond
	resendMax   = 5
)

// Resend sends an operation with send, and, when again is set, sends it
// again after an answer that may have been lost (lostAnswer), with a
// jittered, doubling backoff, at most resendMax times in all, as a client
// resends a request it got no answer to. It
// returns send's last error, and notes the extra sends on the operation of
// ctx ("retries").
//
// Set again only for an operation a second send cannot apply twice (one
// that carries an operation ID), or to show what a blind resend does: a
// client that cannot know whether its write applied leaves again unset,
// and its operation is recorded as uncertain.
func (e *Env) Resend(ctx context.Context, again bool, send func() error) error {
	sends := 1
	if again {
		sends = resendMax
	}
	n, err := resend(ctx, sends, e.Rand.Int64N, send)
	if op := opFrom(ctx); op != nil && op.call != nil && n > 1 {
		op.Set("retries", strconv.Itoa(n-1))
	}
	return err
}

// resend is Resend's loop: it sends with send, again after an answer that
// may have been lost, at most sends times in all, each wait jittered by
// jitter (a draw in [0, n)). It returns how many times it sent, and send's
// last error.
func resend(ctx context.Context, sends int, jitter func(n int64) int64, send func() error) (int, error) {
	wait := resendFirst
	for n := 1; ; n++ {
		err := send()
		if err == nil || n >= sends || ctx.Err() != nil || !LostAnswer(err) {
			return n, err
		}
		if !Sleep(ctx, wait/2+time.Duration(jitter(int64(wait)/2+1))) {
			return n, err
		}
		wait = min(2*wait, resendCap)
	}
}

// LostAnswer reports whether err says that the answer to a request that
// was sent may have been lost — its connection reset, closed or timed out
// while it waited — rather than an answer (a refusal, a server error)
// or a request that never left (history.Classify calls it Fail).
func LostAnswer(err error) bool {
	if history.Classify(err) != history.Unknown {
		return false
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}
