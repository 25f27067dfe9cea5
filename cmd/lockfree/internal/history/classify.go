package history

import (
	"errors"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/puddle/v2"
)

// Classify tells what an operation's error means for its outcome: Fail when
// the request certainly did not take effect, Unknown when it may have. A nil
// error is OK.
//
// Fail: errors that happen before the request leaves the process — pgx
// reports them as safe to retry (a context that had ended, a connection
// closed before use), a failed connect (*pgconn.ConnectError, a refused
// dial), a closed pool — errors wrapped by NotSent, any of refusals
// (errors.Is), and errors the server answered with, which roll the statement
// back (*pgconn.PgError of severity ERROR).
//
// Unknown: everything else, in particular a timeout, a reset or an EOF after
// the request was sent, a context that ended while the request was in
// flight, a FATAL or PANIC from the server, which may end a session whose
// COMMIT had already been made durable, and pgx's "conn closed"
// (pgconn.ErrConnClosed), which it returns both for a connection closed
// before the operation and for one reset while the answer was read. pgx returns the bare context
// error both for a context that ended while waiting for a pooled connection
// and for one that ended while the statement ran, so both are Unknown: a
// caller that wants the first as Fail acquires the connection itself and
// wraps that error with NotSent.
//
// Classify knows transport and server errors only. A mechanism's refusal —
// insufficient stock, a version conflict, a fenced write — is certain and
// tells the checker something; pass such sentinels as refusals, or record
// them as the model says (an insufficient sale is OK with its answer).
func Classify(err error, refusals ...error) Outcome {
	if err == nil {
		return OK
	}
	for _, r := range refusals {
		if r != nil && errors.Is(err, r) {
			return Fail
		}
	}
	var (
		ns      *notSentError
		connect *pgconn.ConnectError
		pgErr   *pgconn.PgError
	)
	switch {
	case errors.As(err, &ns):
		return Fail
	case errors.Is(err, pgconn.ErrConnClosed):
		// pgx reports a connection reset while it read the answer to a
		// statement it had sent as "conn closed", which it also calls
		// safe to retry: the same error as a connection that was closed
		// before this operation began.
		return Unknown
	case pgconn.SafeToRetry(err), errors.As(err, &connect),
		errors.Is(err, puddle.ErrClosedPool), dialFailed(err):
		return Fail
	case errors.As(err, &pgErr):
		if sev := pgErr.SeverityUnlocalized; sev == "FATAL" || sev == "PANIC" ||
			sev == "" && (pgErr.Severity == "FATAL" || pgErr.Severity == "PANIC") {
			return Unknown
		}
		if strings.HasPrefix(pgErr.Code, "08") { // connection exception
			return Unknown
		}
		return Fail
	}
	return Unknown
}

// dialFailed reports an error of establishing a connection: nothing was
// sent on it.
func dialFailed(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

// NotSent marks err as having happened before the operation's request left
// the process, so that Classify reports Fail. It returns nil for nil.
func NotSent(err error) error {
	if err == nil {
		return nil
	}
	return &notSentError{err}
}

type notSentError struct{ err error }

func (e *notSentError) Error() string { return e.err.Error() }
func (e *notSentError) Unwrap() error { return e.err }
