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
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/clock"
	"github.com/lockfree-go/lockfree/examples/internal/backend"
	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/migrate"
	"github.com/lockfree-go/lockfree/partition"
)

//go:embed schema.sql
var schemaSQL string

const (
	account = "account-42"
	appends = 4               // entries to add
	ttl     = 1 * time.Second // the lock's lease, and the members' membership lease
)

type config struct {
	// DB is the database; nil runs everything on the memory backends.
	DB *pgxpool.Pool
	// Mode is "lock" (the code being replaced), "alternative" (partition
	// ownership) or "both".
	Mode string
	// Pause stops the first append between its read and its write until
	// its lease has expired and the other appends are done.
	Pause bool
}

func main() {
	pg := flag.String("postgres", os.Getenv("DATABASE_URL"), `PostgreSQL URL; "memory" for the memory backends; empty: a throwaway local PostgreSQL if its binaries exist, else memory`)
	mode := flag.String("mode", "both", "lock, alternative or both")
	pause := flag.Bool("pause", true, "pause the first append past its lease")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := open(ctx, *pg, config{Mode: *mode, Pause: *pause}); err != nil {
		fmt.Fprintln(os.Stderr, "per-account:", err)
		os.Exit(1)
	}
}

func open(ctx context.Context, pg string, cfg config) error {
	b, err := backend.Open(ctx, pg, os.Stdout)
	if err != nil {
		return err
	}
	defer b.Close()
	cfg.DB = b.Pool
	return run(ctx, cfg, os.Stdout)
}

// run appends to the ledger once per approach the mode selects and prints
// one line per approach.
func run(ctx context.Context, cfg config, w io.Writer) error {
	lock, alt := cfg.Mode == "lock" || cfg.Mode == "both", cfg.Mode == "alternative" || cfg.Mode == "both"
	if !lock && !alt {
		return fmt.Errorf("unknown -mode %q (want lock, alternative or both)", cfg.Mode)
	}
	if cfg.DB != nil {
		if err := migrate.Up(ctx, cfg.DB, migrate.Names{}, fencedlock.Migrations(), partition.Migrations()); err != nil {
			return err
		}
		if _, err := cfg.DB.Exec(ctx, schemaSQL); err != nil {
			return err
		}
	}
	if lock {
		for _, fenced := range []bool{false, true} {
			l, locks, expire := newLockSetup(cfg.DB)
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

// --- Before: the lock-based code -------------------------------------------

// appendNaive is the code being replaced: a lease lock per account around
// read the last number → write the next one. When a holder outlives its
// lease, the next holder reads the same last number, and both write the
// same next one.
func appendNaive(ctx context.Context, locks fencedlock.Store, l ledger, holder string, paused func()) error {
	lease, err := fencedlock.AcquireWait(ctx, locks, "accounts/"+account, holder, ttl, waitConfig(locks))
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
	lease, err := fencedlock.AcquireWait(ctx, locks, "accounts/"+account, holder, ttl, waitConfig(locks))
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

// forward sends an append to the member that owns the account: in a real
// fleet an RPC or partition.Forward (HTTP); here the members share a
// process. While the partition is moving (or a member cannot trust its own
// lease) it tries the members in turn, as a client retrying a 503 through a
// load balancer would.
func forward(ctx context.Context, members map[string]*partition.Member, fn func(m *partition.Member) error) error {
	names := slices.Sorted(maps.Keys(members))
	for i := 0; ; i++ {
		err := fn(members[names[i%len(names)]])
		var notOwner *partition.NotOwnerError
		switch {
		case errors.As(err, &notOwner) && members[notOwner.Owner] != nil:
			err = fn(members[notOwner.Owner])
			if !errors.Is(err, partition.ErrMoving) && !errors.Is(err, partition.ErrNotOwner) {
				return err
			}
		case !errors.Is(err, partition.ErrMoving) && !errors.Is(err, partition.ErrNotOwner):
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(context.Cause(ctx), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// runPartition starts two members, a and b, and appends through them.
func runPartition(ctx context.Context, cfg config, w io.Writer) error {
	l, store, err := newPartitionSetup(cfg.DB)
	if err != nil {
		return err
	}
	// Every membership call of a member goes through its own switch, so the
	// scenario can freeze one member's heartbeats as a process pause would.
	frozen := map[string]*freezer{"a": {Membership: store}, "b": {Membership: store}}
	members := map[string]*partition.Member{}
	defer func() {
		for name, m := range members {
			frozen[name].thaw()
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			m.Stop(cctx)
			cancel()
		}
	}()
	for _, name := range []string{"a", "b"} {
		m, err := partition.NewMember(frozen[name], &partition.Config{Name: name, TTL: ttl})
		if err != nil {
			return err
		}
		if err := m.Start(ctx); err != nil { // joins the fleet and claims its partitions
			return err
		}
		members[name] = m
	}

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
		// The owner's process is paused: no heartbeats. Its membership lease
		// runs out on the store's clock, and the other member claims the
		// partition with a higher epoch.
		frozen[e.Owner].freeze()
		return claimedFrom(ctx, members, e)
	}
	return session(ctx, cfg, w, "partition", l, expire, func(ctx context.Context, _ int, paused func()) error {
		return forward(ctx, members, func(m *partition.Member) error {
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

// claimedFrom waits until another member claims e's partition, above e.
func claimedFrom(ctx context.Context, members map[string]*partition.Member, e partition.Epoch) error {
	for {
		for name, m := range members {
			if name != e.Owner && slices.ContainsFunc(m.Owned(), func(o partition.Epoch) bool { return o.Partition == e.Partition && o.Token > e.Token }) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// errLapsed is the paused append cancelled by its own member: the member
// saw its lease lapse during the pause (here, when a heartbeat failed just
// before it; a paused process's timers run late) and took the partition
// away. Like a stale epoch, the append is run again from the start.
var errLapsed = errors.New("cancelled by its member: lease lapsed during the pause")

// freezer is a Membership whose calls can be held up, as a paused process
// holds up its own heartbeats.
type freezer struct {
	partition.Membership
	mu   sync.Mutex
	gate chan struct{} // nil, or closed when thawed
}

func (f *freezer) freeze() { f.mu.Lock(); f.gate = make(chan struct{}); f.mu.Unlock() }

func (f *freezer) thaw() {
	f.mu.Lock()
	if f.gate != nil {
		close(f.gate)
		f.gate = nil
	}
	f.mu.Unlock()
}

// wait holds a call while frozen. It ignores the call's context, as a
// paused process would: a member whose heartbeat hangs here cannot tell that
// its lease ran out, and keeps running the function it was running.
func (f *freezer) wait() {
	f.mu.Lock()
	g := f.gate
	f.mu.Unlock()
	if g != nil {
		<-g
	}
}

func (f *freezer) Join(ctx context.Context, m partition.MemberInfo, ttl time.Duration) (partition.MemberInfo, error) {
	f.wait()
	return f.Membership.Join(ctx, m, ttl)
}

func (f *freezer) Heartbeat(ctx context.Context, name string, inc int64, ttl time.Duration) error {
	f.wait()
	return f.Membership.Heartbeat(ctx, name, inc, ttl)
}

func (f *freezer) SetLeaving(ctx context.Context, name string, inc int64) error {
	f.wait()
	return f.Membership.SetLeaving(ctx, name, inc)
}

func (f *freezer) Leave(ctx context.Context, name string, inc int64) error {
	f.wait()
	return f.Membership.Leave(ctx, name, inc)
}

func (f *freezer) Live(ctx context.Context) ([]partition.MemberInfo, error) {
	f.wait()
	return f.Membership.Live(ctx)
}

func (f *freezer) Owners(ctx context.Context, n int) ([]partition.Epoch, error) {
	f.wait()
	return f.Membership.Owners(ctx, n)
}

func (f *freezer) Claim(ctx context.Context, member string, inc int64, ps []int) ([]partition.Epoch, error) {
	f.wait()
	return f.Membership.Claim(ctx, member, inc, ps)
}

func (f *freezer) Release(ctx context.Context, es []partition.Epoch) error {
	f.wait()
	return f.Membership.Release(ctx, es)
}

func (f *freezer) Check(ctx context.Context, e partition.Epoch) error {
	f.wait()
	return f.Membership.Check(ctx, e)
}

// --- The ledger: where the entries live ---------------------------------------

// ledger is account's ledger as the code sees it: the accounts and entries
// tables, or a slice when running on the memory backend.
type ledger interface {
	reset(ctx context.Context) error
	last(ctx context.Context) (int64, error)
	append(ctx context.Context, seq int64) error
	fencedLast(ctx context.Context, token int64) (int64, error)
	fencedAppend(ctx context.Context, token, seq int64) error
	verifiedAppend(ctx context.Context, e partition.Epoch, seq int64) error
	entries(ctx context.Context) ([]int64, error)
}

// pgLedger is the accounts and entries tables.
type pgLedger struct {
	db     *pgxpool.Pool
	verify *partition.Postgres // the membership store, for verifiedAppend
}

// fence makes the accounts table's reads and writes fenced by token.
var fence = fencedlock.Fence{Table: "accounts", Key: "id", TokenColumn: "fencing_token"}

func (l *pgLedger) reset(ctx context.Context) error {
	return pgx.BeginFunc(ctx, l.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM entries WHERE account = $1`, account); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO accounts (id) VALUES ($1)
			ON CONFLICT (id) DO UPDATE SET last_seq = 0, fencing_token = 0`, account)
		return err
	})
}

func (l *pgLedger) last(ctx context.Context) (seq int64, err error) {
	err = l.db.QueryRow(ctx, `SELECT last_seq FROM accounts WHERE id = $1`, account).Scan(&seq)
	return seq, err
}

// write adds entry seq and records it as the last, in tx.
func write(ctx context.Context, tx pgx.Tx, seq int64) error {
	if _, err := tx.Exec(ctx, `INSERT INTO entries (account, seq) VALUES ($1, $2)`, account, seq); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `UPDATE accounts SET last_seq = $2 WHERE id = $1`, account, seq)
	return err
}

func (l *pgLedger) append(ctx context.Context, seq int64) error {
	return pgx.BeginFunc(ctx, l.db, func(tx pgx.Tx) error { return write(ctx, tx, seq) })
}

func (l *pgLedger) fencedLast(ctx context.Context, token int64) (seq int64, err error) {
	err = fence.Read(ctx, l.db, account, token, "last_seq", &seq)
	return seq, err
}

func (l *pgLedger) fencedAppend(ctx context.Context, token, seq int64) error {
	return pgx.BeginFunc(ctx, l.db, func(tx pgx.Tx) error {
		if err := fence.Update(ctx, tx, account, token, "last_seq = $1", seq); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO entries (account, seq) VALUES ($1, $2)`, account, seq)
		return err
	})
}

func (l *pgLedger) verifiedAppend(ctx context.Context, e partition.Epoch, seq int64) error {
	return pgx.BeginFunc(ctx, l.db, func(tx pgx.Tx) error {
		// Share-locks the partition's ownership row until commit: a new
		// owner's claim waits for this transaction; a stale epoch fails.
		if err := l.verify.Verify(ctx, tx, e); err != nil {
			return err
		}
		return write(ctx, tx, seq)
	})
}

func (l *pgLedger) entries(ctx context.Context) ([]int64, error) {
	rows, err := l.db.Query(ctx, `SELECT seq FROM entries WHERE account = $1 ORDER BY id`, account)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}

// memLedger is the ledger in memory; its Gate plays the part of the token
// column, and the memory membership store's Verify that of the ownership
// row.
type memLedger struct {
	mu     sync.Mutex
	seqs   []int64
	lastN  int64
	gate   fencedlock.Gate
	verify *partition.Memory
}

func (l *memLedger) reset(context.Context) error {
	l.mu.Lock()
	l.seqs, l.lastN = nil, 0
	l.mu.Unlock()
	return nil
}

func (l *memLedger) last(context.Context) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastN, nil
}

func (l *memLedger) append(_ context.Context, seq int64) error {
	l.mu.Lock()
	l.seqs, l.lastN = append(l.seqs, seq), seq
	l.mu.Unlock()
	return nil
}

func (l *memLedger) fencedLast(ctx context.Context, token int64) (seq int64, err error) {
	err = l.gate.Do(token, func() error { seq, err = l.last(ctx); return err })
	return seq, err
}

func (l *memLedger) fencedAppend(ctx context.Context, token, seq int64) error {
	return l.gate.Do(token, func() error { return l.append(ctx, seq) })
}

func (l *memLedger) verifiedAppend(ctx context.Context, e partition.Epoch, seq int64) error {
	return l.verify.Verify(e, func() error { return l.append(ctx, seq) })
}

func (l *memLedger) entries(context.Context) ([]int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.seqs), nil
}

// --- Setup and the scenario ---------------------------------------------------

// newLockSetup returns the ledger, the lock service and the function that
// makes the paused worker's lease expire: on the memory backend the lock
// service's clock jumps past the lease; on PostgreSQL the database clock
// decides, so it waits for the lease to run out.
func newLockSetup(db *pgxpool.Pool) (ledger, fencedlock.Store, func(context.Context) error) {
	if db == nil {
		c := &clock.Manual{}
		locks, _ := fencedlock.NewMemory(&fencedlock.MemoryConfig{Clock: c}) // a config with a clock is valid
		return &memLedger{}, locks, func(context.Context) error { c.Advance(ttl); return nil }
	}
	locks, err := fencedlock.NewPostgres(db, nil)
	if err != nil {
		panic(err) // a nil config is valid
	}
	return &pgLedger{db: db}, locks, func(ctx context.Context) error {
		for {
			_, held, err := locks.Holder(ctx, "accounts/"+account)
			if err != nil || !held {
				return err
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// newPartitionSetup returns the ledger and the membership store, which the
// ledger's verifiedAppend checks epochs against.
func newPartitionSetup(db *pgxpool.Pool) (ledger, partition.Membership, error) {
	if db == nil {
		store, err := partition.NewMemory(nil)
		return &memLedger{verify: store}, store, err
	}
	store, err := partition.NewPostgres(db, nil)
	if err != nil {
		return nil, nil, err
	}
	return &pgLedger{db: db, verify: store}, store, nil
}

func waitConfig(locks fencedlock.Store) *fencedlock.WaitConfig {
	cfg := &fencedlock.WaitConfig{MaxDelay: 20 * time.Millisecond}
	if w, ok := locks.(fencedlock.Wakeups); ok {
		cfg.Wakeups = w // the memory lock service wakes waiters on release
	}
	return cfg
}

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
	fenced := 0
	refused := func(err error) bool {
		return errors.Is(err, fencedlock.ErrFenced) || errors.Is(err, partition.ErrStaleEpoch) || errors.Is(err, errLapsed)
	}

	isPaused, resume, first := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	var once sync.Once
	go func() {
		first <- add(ctx, 1, func() {
			once.Do(func() {
				if cfg.Pause {
					close(isPaused)
					<-resume
				}
			})
		})
	}()
	var err1 error
	done1 := false
	if cfg.Pause {
		select {
		case <-isPaused:
		case err1 = <-first:
			done1 = true
		}
		if err := expire(ctx); err != nil {
			return err
		}
	} else {
		err1, done1 = <-first, true
	}
	for worker := 2; worker <= appends; worker++ {
		if err := add(ctx, worker, func() {}); err != nil {
			return err
		}
	}
	close(resume)
	if !done1 {
		err1 = <-first
	}
	if refused(err1) {
		fenced++
		err1 = add(ctx, 1, func() {}) // from the start: a new lease or the current owner, a fresh read
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
	nums := make([]string, len(seqs))
	seen := map[int64]bool{}
	dups, gapless := 0, true
	for i, s := range seqs {
		nums[i] = strconv.FormatInt(s, 10)
		if seen[s] {
			dups++
		}
		seen[s] = true
	}
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
