package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/lockfree-go/lockfree/examples/internal/demo"
	"github.com/lockfree-go/lockfree/idempotency"
)

// threeTimes sends a request and the client's two retries: first, then
// retry 1 while first is stopped at its pause (after beforeRetry, when the
// run pauses and it is not nil), then retry 2 once first has returned. It
// returns the three answers.
func threeTimes(pause bool, first func(paused func()) (idempotency.Result, error), beforeRetry func(),
	retry func() (idempotency.Result, error)) (res [3]idempotency.Result, errs [3]error) {
	errs[0], errs[1] = demo.WhilePaused(pause, func(paused func()) (err error) {
		res[0], err = first(paused)
		return err
	}, func() (err error) {
		if pause && beforeRetry != nil {
			beforeRetry()
		}
		res[1], err = retry()
		return err
	})
	res[2], errs[2] = retry()
	return res, errs
}

// whileInFlight sends a request again while it gets 409 (in flight), as a
// client honouring Retry-After would.
func whileInFlight(ctx context.Context, send func() (idempotency.Result, error)) (idempotency.Result, error) {
	for {
		res, err := send()
		if !errors.Is(err, idempotency.ErrInFlight) {
			return res, err
		}
		select {
		case <-ctx.Done():
			return res, errors.Join(err, context.Cause(ctx))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// printCharges prints the lock-based capture's outcome: what the provider
// charged, what the ledger recorded, what the fence refused.
func printCharges(w io.Writer, label string, charges, recorded, refused int) {
	fmt.Fprintf(w, "%s: the provider charged %s %s; %s recorded", label, payment, times(charges), demo.Plural(recorded, "capture"))
	if refused > 0 {
		fmt.Fprintf(w, ", %d record fenced off after its pause", refused)
	}
	if charges > 1 {
		fmt.Fprint(w, " — double charge")
		if charges > recorded {
			fmt.Fprintf(w, ", %s unrecorded", demo.Plural(charges-recorded, "charge"))
		}
	}
	fmt.Fprintln(w)
}

// printAnswers prints head and the answers of the first request and the two
// retries; an error other than "in flight" or "superseded" is returned.
func printAnswers(w io.Writer, head string, res [3]idempotency.Result, errs [3]error) error {
	names := []string{"first", "retry 1", "retry 2"}
	parts := []string{head}
	for i := range res {
		var inFlight *idempotency.InFlightError
		var answer string
		switch err := errs[i]; {
		case errors.As(err, &inFlight):
			answer = "409 in flight"
		case errors.Is(err, idempotency.ErrSuperseded):
			answer = "superseded"
		case err != nil:
			return fmt.Errorf("%s: %w", names[i], err)
		default:
			answer = fmt.Sprintf("%d %s", res[i].Status, res[i].Body)
			if res[i].Replayed {
				answer += " replayed"
			}
		}
		parts = append(parts, names[i]+": "+answer)
	}
	fmt.Fprintln(w, strings.Join(parts, "; "))
	return nil
}

// times says how often: "once", "2 times".
func times(n int) string {
	if n == 1 {
		return "once"
	}
	return fmt.Sprintf("%d times", n)
}
