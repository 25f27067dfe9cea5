// Command per-account is the migration guide from a per-account lock to
// partition ownership (package partition): four appends to one account's
// numbered ledger, one of which pauses past its lease. See README.md.
//
//	go run ./examples/per-account [-postgres URL|memory] [-mode lock|alternative|both] [-pause=false]
package main

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lockfree-go/lockfree/examples/internal/demo"
	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/partition"
)

//go:embed schema.sql
var schemaSQL string

const (
	account = "account-42"
	appends = 4               // entries to add
	ttl     = 1 * time.Second // the lock's lease, and the members' membership lease
)

// config is what the program runs with. With Pause, the first append stops
// between its read and its write until its lease has expired and the other
// appends are done.
type config = demo.Config

func main() { demo.Main("per-account", "pause the first append past its lease", run) }

// run appends to the ledger once per approach the mode selects and prints
// one line per approach.
func run(ctx context.Context, cfg config, w io.Writer) error {
	lock, alt, err := demo.Modes(cfg.Mode)
	if err != nil {
		return err
	}
	if err := demo.Migrate(ctx, cfg.DB, schemaSQL, fencedlock.Migrations(), partition.Migrations()); err != nil {
		return err
	}
	if lock {
		for _, fenced := range []bool{false, true} {
			l := newLedger(cfg.DB)
			locks, expire := demo.Locks(cfg.DB, "accounts/"+account, ttl)
			add, label := appendNaive, "lock (naive)"
			if fenced {
				add, label = appendFenced, "lock (fenced)"
			}
			if err := session(ctx, cfg, w, label, l, expire, func(ctx context.Context, worker int, paused func()) error {
				return add(ctx, locks, l, fmt.Sprintf("worker-%d", worker), paused)
			}); err != nil {
				return fmt.Errorf("%s: %w", label, err)
			}
		}
	}
	if alt {
		if err := runPartition(ctx, cfg, w); err != nil {
			return fmt.Errorf("partition: %w", err)
		}
	}
	return nil
}

// wait polls a busy lock often: the example's holders are quick.
var wait = &fencedlock.WaitConfig{MaxDelay: 20 * time.Millisecond}

// --- Before: the lock-based code -------------------------------------------

// appendNaive is the code being replaced: a lease lock per account around
// read the last number → write the next one. When a holder outlives its
// lease, the next holder reads the same last number, and both write the
// same next one.
func appendNaive(ctx context.Context, locks fencedlock.Store, l ledger, holder string, paused func()) error {
	lease, err := fencedlock.AcquireWait(ctx, locks, "accounts/"+account, holder, ttl, wait)
	if err != nil {
		return err
	}
	defer func() { _ = locks.Release(context.WithoutCancel(ctx), lease) }() // ErrNotHeld once the lease has run out

	last, err := l.last(ctx) // SELECT last_seq FROM accounts WHERE id = $1
	if err != nil {
		return err
	}
	paused()                     // a GC pause, swap, a VM migration, SIGSTOP …
	return l.append(ctx, last+1) // INSERT INTO entries …; UPDATE accounts SET last_seq = $2 …
}

// appendFenced is the same lock done right: the read stamps the account
// row with the lease's fencing token, and the write (in one transaction
// with the entry) is accepted only if no later token has touched the row.
func appendFenced(ctx context.Context, locks fencedlock.Store, l ledger, holder string, paused func()) error {
	lease, err := fencedlock.AcquireWait(ctx, locks, "accounts/"+account, holder, ttl, wait)
	if err != nil {
		return err
	}
	defer func() { _ = locks.Release(context.WithoutCancel(ctx), lease) }()

	last, err := l.fencedLast(ctx, lease.Token) // UPDATE accounts SET fencing_token = $t … AND fencing_token <= $t RETURNING last_seq
	if err != nil {
		return err
	}
	paused()
	return l.fencedAppend(ctx, lease.Token, last+1) // fenced UPDATE of last_seq + INSERT, one transaction
}

// --- After: partition ownership -----------------------------------------------

// appendOwned is the replacement: the account's work runs on the serial
// executor of its partition, on the one member that owns the partition —
// no lock per call. The epoch fences the write, because a member can pause
// past its membership lease too.
func appendOwned(ctx context.Context, m *partition.Member, l ledger, paused func(e partition.Epoch)) error {
	return m.Do(ctx, account, func(ctx context.Context, e partition.Epoch) error {
		last, err := l.last(ctx) // a plain read: this executor is the account's only writer
		if err != nil {
			return err
		}
		paused(e)
		return l.verifiedAppend(ctx, e, last+1) // Verify(epoch) + INSERT + UPDATE, one transaction
	})
}

// runPartition starts two members, a and b, and appends through them.
func runPartition(ctx context.Context, cfg config, w io.Writer) error {
	l, store, err := newPartitionSetup(cfg.DB)
	if err != nil {
		return err
	}
	f, err := startFleet(ctx, store)
	if err != nil {
		return err
	}
	defer f.stop(ctx)

	var (
		mu      sync.Mutex
		stale   partition.Epoch // the epoch of the last function that reached its pause
		expired partition.Epoch // the paused function's epoch, once expire has run
	)
	expire := func(ctx context.Context) error {
		mu.Lock()
		e := stale
		expired = e
		mu.Unlock()
		return f.expire(ctx, e)
	}
	return session(ctx, cfg, w, "partition", l, expire, func(ctx context.Context, _ int, paused func()) error {
		return forward(ctx, f.members, func(m *partition.Member) error {
			var ran partition.Epoch
			err := appendOwned(ctx, m, l, func(e partition.Epoch) {
				mu.Lock()
				stale, ran = e, e
				mu.Unlock()
				paused()
			})
			mu.Lock()
			wasPaused := ran.Token != 0 && ran == expired
			mu.Unlock()
			if wasPaused && errors.Is(err, partition.ErrMoving) {
				// The paused member's own timers saw its lease lapse, and it
				// cancelled the function before the store had to refuse it.
				return fmt.Errorf("%w: %v", errLapsed, err)
			}
			return err
		})
	})
}

// --- The run -----------------------------------------------------------------

// session resets the ledger and runs the appends. Append 1 starts first;
// with cfg.Pause it stops where add calls paused until its lease has
// expired (expire) and appends 2–4 have run one after another; then it
// wakes and writes. An append refused for a stale token or epoch, or
// cancelled by its member (errLapsed), is run again from the start (new
// lease or current owner, fresh read), as the caller of a refused
// operation would.
func session(ctx context.Context, cfg config, w io.Writer, label string, l ledger, expire func(context.Context) error,
	add func(ctx context.Context, worker int, paused func()) error) error {
	if err := l.reset(ctx); err != nil {
		return err
	}
	err1, err := demo.WhilePaused(cfg.Pause, func(paused func()) error { return add(ctx, 1, paused) }, func() error {
		if cfg.Pause {
			if err := expire(ctx); err != nil {
				return err
			}
		}
		for worker := 2; worker <= appends; worker++ {
			if err := add(ctx, worker, func() {}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	fenced := 0
	if errors.Is(err1, fencedlock.ErrFenced) || errors.Is(err1, partition.ErrStaleEpoch) || errors.Is(err1, errLapsed) {
		fenced, err1 = 1, add(ctx, 1, func() {}) // from the start: a new lease or the current owner, a fresh read
	}
	if err1 != nil {
		return err1
	}
	seqs, err := l.entries(ctx)
	if err != nil {
		return err
	}
	printLedger(w, label, seqs, fenced)
	return nil
}

// printLedger prints the account's entries and what is wrong with them:
// duplicates, or gaps.
func printLedger(w io.Writer, label string, seqs []int64, fenced int) {
	nums, seen := make([]string, len(seqs)), map[int64]bool{}
	for i, s := range seqs {
		nums[i], seen[s] = strconv.FormatInt(s, 10), true
	}
	dups, gapless := len(seqs)-len(seen), true
	for i := int64(1); i <= int64(len(seen)); i++ {
		gapless = gapless && seen[i]
	}
	fmt.Fprintf(w, "%s: %s has entries %s", label, account, strings.Join(nums, " "))
	switch {
	case dups > 0:
		fmt.Fprintf(w, " — %d duplicate", dups)
	case gapless:
		fmt.Fprint(w, " — gapless")
	default:
		fmt.Fprint(w, " — gaps")
	}
	if fenced > 0 {
		fmt.Fprintf(w, "; %d append fenced off after its pause and run again", fenced)
	}
	fmt.Fprintln(w)
}
