package scenario

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/partition"
)

// accountsDDL has no unique constraint on (account, seq) on purpose: a
// duplicate or a gap must reach the checker, not be refused by the table.
const accountsDDL = `CREATE TABLE accounts (
	id            text   PRIMARY KEY,
	last_seq      bigint NOT NULL DEFAULT 0,
	fencing_token bigint NOT NULL DEFAULT 0
);
CREATE TABLE account_events (
	account text   NOT NULL,
	seq     bigint NOT NULL
)`

// The statements of the accounts scenario on PostgreSQL. Every approach
// writes the entity's new last number and its event in one statement.
const (
	// sqlRawAppend is the minimum for the effect: one statement, whose
	// UPDATE row lock orders the appends.
	sqlRawAppend = `WITH u AS (
		UPDATE accounts SET last_seq = last_seq + 1 WHERE id = $1 RETURNING id, last_seq)
	INSERT INTO account_events (account, seq) SELECT id, last_seq FROM u`
	// sqlLastSeq is the single writer's read, on a miss of its cache.
	sqlLastSeq = `SELECT last_seq FROM accounts WHERE id = $1`
	// sqlOwnedAppend is the single writer's write, fenced by the epoch
	// (the %s is partition.Postgres.Condition from $4) and by the expected
	// last number.
	sqlOwnedAppend = `WITH u AS (
		UPDATE accounts SET last_seq = $2 WHERE id = $1 AND last_seq = $3 AND %s RETURNING id)
	INSERT INTO account_events (account, seq) SELECT id, $2 FROM u`
	// sqlFencedAppend is the fenced twin's write: the token condition and
	// stamp of fencedlock.Fence.Update, and the event, in one statement.
	sqlFencedAppend = `WITH u AS (
		UPDATE accounts SET last_seq = $2, fencing_token = $3 WHERE id = $1 AND fencing_token <= $3 RETURNING id)
	INSERT INTO account_events (account, seq) SELECT id, $2 FROM u`
	// sqlToken reads the token that refused a fenced write.
	sqlToken = `SELECT fencing_token FROM accounts WHERE id = $1`
	// sqlNaiveRead is the statement of the fenced twin's read,
	// fencedlock.Fence.Read (UPDATE "accounts" SET "fencing_token" = $2
	// WHERE "id" = $1 AND "fencing_token" <= $2 RETURNING last_seq), without
	// its token condition.
	sqlNaiveRead = `UPDATE "accounts" SET "fencing_token" = $2 WHERE "id" = $1 RETURNING last_seq`
	// tokenCondition is what the naive twin leaves out of the fenced one's
	// write.
	tokenCondition = ` AND fencing_token <= $3`
)

// sqlNaiveAppend is the fenced twin's write without its token condition.
var sqlNaiveAppend = strings.Replace(sqlFencedAppend, tokenCondition, "", 1)

// accountsMembers is how many partition members the alternative runs
// in-process.
const accountsMembers = 3

func init() {
	register(Scenario{
		Name:        "accounts",
		Description: "clients append the next sequence number to a random entity's event log; per entity, no gap and no duplicate",
		Approaches:  []Approach{Alternative, FencedLock, NaiveLock, Raw},
		Labels: map[Approach]string{
			Alternative: "partition.Member.Do: the owner's serial executor, last number cached per epoch; one statement writes it and the event, fenced by Condition (1 round trip)",
			FencedLock:  "partition.Fenced, LISTEN/NOTIFY wake-ups: acquire → fenced read (Fence.Read stamps the token, returns the row) → one statement: fenced write + event → release (4 round trips)",
			NaiveLock:   "the same lease lock and the same statements without the token condition (4 round trips)",
			Raw:         "bare SQL, the minimum: one statement, UPDATE last_seq + 1 → INSERT event (the row lock orders them; 1 round trip)",
		},
		Migrations: partition.Migrations(),
		New:        newAccounts,
	})
}

// account is one entity's state on the memory backend.
type account struct {
	mu   sync.Mutex
	last int64
	seqs []int64 // the event log's sequence numbers, in append order
	gate fencedlock.Gate
}

type accounts struct {
	env      *Env
	approach Approach
	keys     []string
	accepted []atomic.Int64
	unsure   []atomic.Int64
	fence    fencedlock.Fence

	// the alternative
	members []*partition.Member
	byName  map[string]*partition.Member
	pgStore *partition.Postgres
	memMem  *partition.Memory
	known   knownSeqs

	lock *partition.Fenced // the twins' lock

	mem []account // memory backend
}

func newAccounts(ctx context.Context, env *Env, a Approach) (Workload, error) {
	w := &accounts{env: env, approach: a, fence: fencedlock.Fence{Table: "accounts", Key: "id"}}
	for i := 0; i < env.Keys; i++ {
		w.keys = append(w.keys, "account-"+strconv.Itoa(i))
	}
	w.accepted = make([]atomic.Int64, env.Keys)
	w.unsure = make([]atomic.Int64, env.Keys)
	var store partition.Membership
	if env.Memory() {
		if a == Raw {
			return nil, errSkip
		}
		w.mem = make([]account, env.Keys)
		w.memMem, _ = partition.NewMemory(nil) // every MemoryConfig is valid
		store = w.memMem
	} else {
		if _, err := env.Admin.Exec(ctx, accountsDDL); err != nil {
			return nil, err
		}
		if _, err := env.Admin.Exec(ctx, `INSERT INTO accounts (id) SELECT 'account-' || i FROM generate_series(0, $1 - 1) AS i`, env.Keys); err != nil {
			return nil, err
		}
		p, err := partition.NewPostgres(env.DB, nil)
		if err != nil {
			return nil, err
		}
		w.pgStore, store = p, p
	}
	switch a {
	case Alternative:
		if err := w.startMembers(ctx, store); err != nil {
			w.Close()
			return nil, err
		}
	case FencedLock, NaiveLock:
		lock, err := newAccountsLock(env)
		if err != nil {
			return nil, err
		}
		w.lock = lock
	}
	return w, nil
}

// newAccountsLock is the twins' lock: partition.Fenced with waiters woken by
// the release (LISTEN/NOTIFY on PostgreSQL). The lease is not renewed —
// every critical section fits in one — so that the pause fault, which stops
// only the client's goroutine, outlasts the lease as a process pause would.
func newAccountsLock(env *Env) (*partition.Fenced, error) {
	locks := env.Locks
	if !env.Memory() {
		pg, err := fencedlock.NewPostgres(env.DB, &fencedlock.PostgresConfig{Notify: true})
		if err != nil {
			return nil, err
		}
		locks = pg
	}
	return partition.NewFenced(locks, &partition.FencedConfig{LockerConfig: fencedlock.LockerConfig{
		TTL:        env.LeaseTTL,
		LockPrefix: "accounts/",
		Wait:       &fencedlock.WaitConfig{MinDelay: 500 * time.Microsecond, MaxDelay: 20 * time.Millisecond},
		Keepalive:  &fencedlock.KeepaliveConfig{NoRenew: true},
	}})
}

// startMembers starts the fleet and waits until every partition is owned
// by the member the ring places it on, so the run does not measure the
// initial handovers.
func (w *accounts) startMembers(ctx context.Context, store partition.Membership) error {
	w.byName = map[string]*partition.Member{}
	for i := 0; i < accountsMembers; i++ {
		m, err := partition.NewMember(store, &partition.Config{
			Name: "m" + strconv.Itoa(i), TTL: 2 * time.Second,
			Interval: 200 * time.Millisecond, MoveInterval: 10 * time.Millisecond,
		})
		if err != nil {
			return err
		}
		if err := m.Start(ctx); err != nil {
			return err
		}
		w.members = append(w.members, m)
		w.byName[m.Name()] = m
	}
	deadline := time.Now().Add(30 * time.Second)
	for !w.settled() {
		if time.Now().After(deadline) {
			return errors.New("accounts: partitions did not settle on the members within 30s")
		}
		if !sleepCtx(ctx, 10*time.Millisecond) {
			return ctx.Err()
		}
	}
	return nil
}

// settled reports whether every member sees the whole fleet and owns
// exactly the partitions its ring places on it. The ring is a pure function
// of the member names, so equal member lists mean equal placements.
func (w *accounts) settled() bool {
	owned := 0
	for _, m := range w.members {
		r := m.Ring()
		if len(r.Members()) != len(w.members) {
			return false
		}
		want := 0
		for p := 0; p < r.Partitions(); p++ {
			if r.Owner(p) == m.Name() {
				want++
			}
		}
		es := m.Owned()
		for _, e := range es {
			if r.Owner(e.Partition) != m.Name() {
				return false
			}
		}
		if len(es) != want {
			return false
		}
		owned += len(es)
	}
	return len(w.members) > 0 && owned == w.members[0].Ring().Partitions()
}

// Close stops the alternative's members (Run calls it after the check).
func (w *accounts) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, len(w.members))
	for i, m := range w.members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = m.Stop(ctx)
		}()
	}
	wg.Wait()
	w.members = nil
	return errors.Join(errs...)
}

func (w *accounts) Op(ctx context.Context, client int, rnd *rand.Rand) Outcome {
	k := rnd.IntN(len(w.keys))
	var out Outcome
	switch w.approach {
	case Alternative:
		out = w.partitioned(ctx, client, rnd, k)
	case Raw:
		w.env.Pause(ctx, rnd)
		_, err := w.env.DB.Exec(ctx, sqlRawAppend, w.keys[k])
		out = writeOutcome(err)
	case FencedLock, NaiveLock:
		out = w.locked(ctx, rnd, k)
	}
	switch {
	case out.Uncertain:
		w.unsure[k].Add(1)
	case out.Err == nil && !out.Rejected:
		w.accepted[k].Add(1)
	}
	return out
}

// partitioned is the alternative: the client asks its member (client %
// members), which runs the append on the key's partition executor or names
// the owner, to which the client forwards.
func (w *accounts) partitioned(ctx context.Context, client int, rnd *rand.Rand, k int) Outcome {
	// fn may outlive Do (when ctx ends while it runs): give it its own
	// random source rather than the client's.
	prnd := rand.New(rand.NewPCG(rnd.Uint64(), rnd.Uint64()))
	fn := func(ctx context.Context, e partition.Epoch) error { return w.append(ctx, prnd, k, e) }
	m := w.members[client%len(w.members)]
	retries := 0
	for {
		err := m.Do(ctx, w.keys[k], fn)
		var notOwner *partition.NotOwnerError
		switch {
		case err == nil:
			return Outcome{Retries: retries}
		case errors.As(err, &notOwner) && w.byName[notOwner.Owner] != nil:
			m = w.byName[notOwner.Owner]
			retries++
			continue
		case errors.Is(err, partition.ErrMoving), errors.Is(err, partition.ErrNotOwner):
			retries++
			if sleepCtx(ctx, time.Millisecond) {
				continue
			}
			return Outcome{Err: err, Retries: retries} // never queued: no effect
		case errors.Is(err, partition.ErrStaleEpoch), errors.Is(err, errStaleSeq):
			return Outcome{Rejected: true, Retries: retries}
		case ctx.Err() != nil:
			// Do returns when ctx ends, possibly while fn runs.
			return Outcome{Err: err, Uncertain: true, Retries: retries}
		}
		out := writeOutcome(err)
		out.Retries = retries
		return out
	}
}

// append is the single writer's read-modify-write, run on the executor of
// the key's partition with the partition's epoch.
func (w *accounts) append(ctx context.Context, rnd *rand.Rand, k int, e partition.Epoch) error {
	if w.env.Memory() {
		a := &w.mem[k]
		var last int64
		if err := w.memMem.Verify(e, func() error { a.mu.Lock(); last = a.last; a.mu.Unlock(); return nil }); err != nil {
			return err
		}
		w.env.Pause(ctx, rnd) // outside Verify, which would hold off every claim meanwhile
		if err := ctx.Err(); err != nil {
			return err
		}
		// Verify again: the epoch fences the write, so a new owner that
		// appended meanwhile makes this one fail rather than duplicate.
		return w.memMem.Verify(e, func() error {
			a.mu.Lock()
			a.last = last + 1
			a.seqs = append(a.seqs, last+1)
			a.mu.Unlock()
			return nil
		})
	}
	// The single writer knows each entity's last number from its own
	// appends in this epoch; it reads the table on a miss only.
	last, ok := w.known.get(e, k)
	if !ok {
		if err := w.env.DB.QueryRow(ctx, sqlLastSeq, w.keys[k]).Scan(&last); err != nil {
			return err
		}
	}
	w.env.Pause(ctx, rnd)
	if err := ctx.Err(); err != nil {
		w.known.forget(e, k)
		return err
	}
	// One statement, fenced by the epoch (the condition share-locks the
	// ownership row, so no claim lands between the check and the write) and
	// by the expected last number (a late commit of an earlier append whose
	// fate was unknown makes this one change nothing rather than duplicate).
	// It is not cancelled with ctx: the partition's next function must not
	// run before this append's fate is known.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	cond, cargs := w.pgStore.Condition(e, 4)
	tag, err := w.env.DB.Exec(wctx, fmt.Sprintf(sqlOwnedAppend, cond), append([]any{w.keys[k], last + 1, last}, cargs...)...)
	if err == nil && tag.RowsAffected() == 0 {
		if err = w.pgStore.Check(wctx, e); err == nil {
			err = errStaleSeq
		}
	}
	if err != nil {
		w.known.forget(e, k)
		return err
	}
	w.known.set(e, k, last+1)
	return nil
}

// knownSeqs is what the single writers know of their entities' last
// sequence numbers, per epoch: in one epoch only the owner's executor
// appends to the partition's entities, and each append it makes (or fails
// to make) goes through here, so a known number is the table's.
type knownSeqs struct {
	mu sync.Mutex
	m  map[partition.Epoch]map[int]int64
}

func (c *knownSeqs) get(e partition.Epoch, k int) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[e][k]
	return v, ok
}

func (c *knownSeqs) set(e partition.Epoch, k int, v int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[partition.Epoch]map[int]int64{}
	}
	byKey := c.m[e]
	if byKey == nil {
		for old := range c.m {
			if old.Partition == e.Partition {
				delete(c.m, old) // an earlier tenure: its numbers may be stale
			}
		}
		byKey = map[int]int64{}
		c.m[e] = byKey
	}
	byKey[k] = v
}

func (c *knownSeqs) forget(e partition.Epoch, k int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m[e], k)
}

// errStaleSeq is an append whose expected last number was not the table's:
// the write changed nothing.
var errStaleSeq = errors.New("accounts: last sequence number changed since it was read")

// locked is the twins' operation: under the key's lease lock (the same
// partition.Fenced for both), read the last number and append the next.
// The statements run on the operation's ctx, not the lease's: the pause
// fault stands for a process pause, after which a write already on its way
// does not look at the lease's context.
func (w *accounts) locked(ctx context.Context, rnd *rand.Rand, k int) Outcome {
	var out Outcome
	ran := false
	err := w.lock.Do(ctx, w.keys[k], func(_ context.Context, lease fencedlock.Lease) error {
		ran = true
		if w.env.Memory() {
			out = w.memAppend(ctx, rnd, k, lease)
		} else {
			out = w.pgAppend(ctx, rnd, k, lease)
		}
		return out.Err
	})
	if !ran {
		return Outcome{Err: err} // no lease: nothing was written
	}
	return out // a failed release changes nothing that was written
}

// pgAppend is the twins' critical section on PostgreSQL: read the last
// number, (pause), write it and the event in one statement. The fenced twin
// reads with Fence.Read (stamping its token) and writes only if no later
// token touched the row; the naive twin runs the same statements without
// the token condition.
func (w *accounts) pgAppend(ctx context.Context, rnd *rand.Rand, k int, lease fencedlock.Lease) Outcome {
	id := w.keys[k]
	var last int64
	var err error
	if w.approach == NaiveLock {
		err = w.env.DB.QueryRow(ctx, sqlNaiveRead, id, lease.Token).Scan(&last)
	} else {
		err = w.fence.Read(ctx, w.env.DB, id, lease.Token, "last_seq", &last)
	}
	if err != nil {
		return readOutcome(err)
	}
	w.env.Pause(ctx, rnd)
	write := sqlFencedAppend
	if w.approach == NaiveLock {
		write = sqlNaiveAppend
	}
	tag, err := w.env.DB.Exec(ctx, write, id, last+1, lease.Token)
	if err == nil && tag.RowsAffected() == 0 {
		err = w.refused(ctx, id, lease.Token)
	}
	return writeOutcome(err)
}

// refused explains a fenced write that changed nothing: the row has seen a
// later token.
func (w *accounts) refused(ctx context.Context, id string, token int64) error {
	var current int64
	if err := w.env.DB.QueryRow(ctx, sqlToken, id).Scan(&current); err != nil {
		return err
	}
	if current <= token {
		return fmt.Errorf("accounts: write with token %d changed nothing, row token %d", token, current)
	}
	return &fencedlock.FencedError{Presented: token, Required: current}
}

// readOutcome classifies the error of a read: nothing was written.
func readOutcome(err error) Outcome {
	if errors.Is(err, fencedlock.ErrFenced) {
		return Outcome{Rejected: true}
	}
	return Outcome{Err: err}
}

// memAppend is pgAppend on the memory backend: a Gate plays the part of the
// token column.
func (w *accounts) memAppend(ctx context.Context, rnd *rand.Rand, k int, lease fencedlock.Lease) Outcome {
	a := &w.mem[k]
	guard := func(fn func() error) error {
		if w.approach == NaiveLock {
			return fn()
		}
		return a.gate.Do(lease.Token, fn) // the fenced read raises the gate
	}
	var last int64
	if err := guard(func() error { a.mu.Lock(); last = a.last; a.mu.Unlock(); return nil }); err != nil {
		return readOutcome(err)
	}
	w.env.Pause(ctx, rnd)
	return writeOutcome(guard(func() error {
		a.mu.Lock()
		a.last = last + 1
		a.seqs = append(a.seqs, last+1)
		a.mu.Unlock()
		return nil
	}))
}

// accountStats summarises one entity's event log.
type accountStats struct {
	rows, distinct, max, last int64
}

func (w *accounts) Check(ctx context.Context) (int64, string, error) {
	stats := make([]accountStats, len(w.keys))
	if w.env.Memory() {
		for i := range w.mem {
			a := &w.mem[i]
			a.mu.Lock()
			seen := map[int64]bool{}
			s := accountStats{rows: int64(len(a.seqs)), last: a.last}
			for _, q := range a.seqs {
				if !seen[q] {
					seen[q] = true
					s.distinct++
				}
				s.max = max(s.max, q)
			}
			a.mu.Unlock()
			stats[i] = s
		}
	} else {
		idx := map[string]int{}
		for i, k := range w.keys {
			idx[k] = i
		}
		rows, err := w.env.Admin.Query(ctx, `SELECT a.id, coalesce(e.n, 0), coalesce(e.d, 0), coalesce(e.mx, 0), a.last_seq
			FROM accounts a LEFT JOIN (
				SELECT account, count(*) AS n, count(DISTINCT seq) AS d, max(seq) AS mx
				FROM account_events GROUP BY account) e ON e.account = a.id`)
		if err != nil {
			return 0, "", err
		}
		for rows.Next() {
			var id string
			var s accountStats
			if err := rows.Scan(&id, &s.rows, &s.distinct, &s.max, &s.last); err != nil {
				return 0, "", err
			}
			if i, ok := idx[id]; ok {
				stats[i] = s
			}
		}
		if err := rows.Err(); err != nil {
			return 0, "", err
		}
		var stray int64
		if err := w.env.Admin.QueryRow(ctx, `SELECT count(*) FROM account_events e
			WHERE seq < 1 OR NOT EXISTS (SELECT 1 FROM accounts a WHERE a.id = e.account)`).Scan(&stray); err != nil {
			return 0, "", err
		}
		if stray > 0 {
			return stray, fmt.Sprintf("%d events with a sequence number below 1 or no entity", stray), nil
		}
	}
	var dups, gaps, lost, phantom, drift int64
	for i, s := range stats {
		acc, unsure := w.accepted[i].Load(), w.unsure[i].Load()
		dups += s.rows - s.distinct // the same number appended twice
		gaps += s.max - s.distinct  // numbers in 1…max never appended
		switch {
		case s.rows < acc:
			lost += acc - s.rows // acknowledged appends missing
		case s.rows > acc+unsure:
			phantom += s.rows - acc - unsure // appends no client was told of
		}
		if s.last != s.max {
			drift++ // the entity's last_seq disagrees with its log
		}
	}
	v := dups + gaps + lost + phantom + drift
	if v == 0 {
		return 0, "", nil
	}
	return v, fmt.Sprintf("%d duplicate sequence numbers, %d gaps, %d acknowledged appends missing, %d appends no client was told of, %d entities whose last_seq disagrees with their log",
		dups, gaps, lost, phantom, drift), nil
}
