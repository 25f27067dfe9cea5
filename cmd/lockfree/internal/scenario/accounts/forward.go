package accounts

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/partition"
)

// The hostile clients of the alternatives' members: each member serves the
// appends of HTTP clients through partition.Forward, and the odd workers
// send it, besides their operations, requests it must refuse before they
// reach an executor — bodies larger than bodyLimit (413) and bodies that
// trickle past bodyDeadline (408) — to the owner of a key at random.
const (
	bodyLimit    = 1 << 10
	bodyDeadline = 300 * time.Millisecond
	// queueBound is the longest a probe may wait for its partition's
	// executor beyond the time operations' calls ran on it or faults held
	// them: the executor runs nothing else, so a wait past it is a
	// request holding the executor.
	queueBound = bodyDeadline / 3
	// probeEvery is how often a member probes its executors.
	probeEvery = 50 * time.Millisecond
	// tickEvery is the period of the worker's ticker (schedule); the
	// time its ticks come late is the time the process was paused or
	// descheduled, which a probe's wait is not held to.
	tickEvery = 5 * time.Millisecond
	// scheduleGap is how long the ticker may miss ticking before a probe
	// that ends is not judged: a pause may be under way. The lateness it
	// lets through unexplained stays below queueBound; 25 ms left most
	// probes unjudged on a loaded machine.
	scheduleGap = 50 * time.Millisecond
)

// The stalls the probes saw: a call on account's partition at member
// waited waited_ms for the executor.
const (
	sqlAccountsStallsTable = `CREATE TABLE account_stalls (
	account   text   NOT NULL,
	member    text   NOT NULL,
	waited_ms bigint NOT NULL
)`
	sqlAccountsStall  = `INSERT INTO account_stalls (account, member, waited_ms) VALUES ($1, $2, $3)`
	sqlAccountsStalls = `SELECT account, member, waited_ms FROM account_stalls ORDER BY account`
)

// stalled is a call on a partition's executor held past queueBound by
// something that is none of the operations' calls: a slow request body read
// on the executor.
const stalled history.Anomaly = "stall"

// stalls adds to rep a violation for each stall a probe saw.
func stalls(ctx context.Context, db *pgxpool.Pool, rep *history.Findings) error {
	rows, err := db.Query(ctx, sqlAccountsStalls)
	if err != nil {
		return err
	}
	var key, member string
	var ms int64
	_, err = pgx.ForEachRow(rows, []any{&key, &member, &ms}, func() error {
		rep.Add(history.Violation{Key: key, Anomaly: stalled,
			Text: fmt.Sprintf("a call for %s on member %s waited %d ms for its partition's executor beyond the operations' calls that ran on it: a request held it", key, member, ms)})
		return nil
	})
	return err
}

// frontend is a member's HTTP server: partition.Forward over the member's
// appends, on a loopback port the member joined with (Config.Addr).
type frontend struct {
	ln  net.Listener
	srv *http.Server
}

func listen() (*frontend, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	return &frontend{ln: ln}, nil
}

func (f *frontend) addr() string { return f.ln.Addr().String() }

// forwardConfig is every member's: the hostile clients' bodies are refused.
func forwardConfig() *partition.ForwardConfig {
	return &partition.ForwardConfig{MaxRequestBody: bodyLimit, RequestBodyTimeout: bodyDeadline}
}

// serve starts serving c's member.
func (f *frontend) serve(c *accountsAltClient) {
	mux := http.NewServeMux()
	mux.Handle("POST /accounts/{account}/events", partition.Forward(c.member,
		func(r *http.Request) string { return r.PathValue("account") }, c.serveAppend))
	f.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go f.srv.Serve(f.ln) //nolint:errcheck // ErrServerClosed, or the listener's end
}

func (f *frontend) close() error {
	if f.srv == nil {
		return f.ln.Close()
	}
	return f.srv.Close()
}

// serveAppend appends to the request's account as its body's sender. The
// hostile clients' requests must never reach it: one that does is appended
// by no operation of the history, and the check finds it (phantom).
func (c *accountsAltClient) serveAppend(w http.ResponseWriter, r *http.Request, e partition.Epoch) {
	ctx, key := r.Context(), r.PathValue("account")
	body, _ := io.ReadAll(r.Body)
	var last int64
	err := c.env.DB.QueryRow(ctx, sqlAccountsRead, key).Scan(&last)
	if err == nil {
		cond, args := c.store.Condition(e, 5)
		_, err = c.env.DB.Exec(ctx, fmt.Sprintf(sqlAccountsPartitioned, cond),
			append([]any{key, last + 1, last, "request/" + string(bytes.TrimSpace(body[:min(len(body), 32)]))}, args...)...)
	}
	if err != nil {
		http.Error(w, "append failed", http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusCreated)
}

// prober probes a member's executors, every probeEvery: a call that does
// nothing, on a key the member owns. The executor is serial, so the probe's
// wait is the time operations' calls ran on it, the time the worker was
// paused or descheduled (its ticker's late ticks) or its faults held an
// operation at an inject point (Env.Held), and what else held the
// executor: past queueBound, that is a stall, written to account_stalls
// for the check.
type prober struct {
	c     *accountsAltClient
	sched schedule
	rand  *rand.Rand
	// busy is the time operations' calls ran on each partition's
	// executor.
	busyMu sync.Mutex
	busy   map[int]*engine.Busy

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func startProber(ctx context.Context, c *accountsAltClient) *prober {
	p := &prober{c: c, rand: rand.New(rand.NewPCG(uint64(c.env.Client), 27))}
	p.sched.tick(time.Now())
	ctx, p.cancel = context.WithCancel(context.WithoutCancel(ctx))
	p.wg.Add(2)
	go func() {
		defer p.wg.Done()
		engine.Every(ctx, tickEvery, func() { p.sched.tick(time.Now()) })
	}()
	go func() {
		defer p.wg.Done()
		for engine.Sleep(ctx, probeEvery) {
			p.probe(ctx)
		}
	}()
	return p
}

// ran marks an operation's call on key's partition as running on its
// executor, until the returned func is called.
func (p *prober) ran(key string) (end func()) {
	return p.busyOn(p.c.member.Partition(key)).Start()
}

// busyOn returns the Busy clock of partition part's executor.
func (p *prober) busyOn(part int) *engine.Busy {
	p.busyMu.Lock()
	defer p.busyMu.Unlock()
	if p.busy == nil {
		p.busy = map[int]*engine.Busy{}
	}
	b := p.busy[part]
	if b == nil {
		b = &engine.Busy{}
		p.busy[part] = b
	}
	return b
}

// explained returns the time, up to now, that operations' calls ran on
// part's executor or the worker's faults held its goroutines.
func (p *prober) explained(part int, now time.Time) time.Duration {
	return p.busyOn(part).At(now) + p.c.env.Held(now)
}

// probe probes the executor of a key the member owns, once.
func (p *prober) probe(ctx context.Context) {
	var keys []string
	for i := 0; i < p.c.env.Keys; i++ {
		if k := engine.Key("account-", i); p.owns(k) {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return
	}
	key := keys[p.rand.IntN(len(keys))]
	part := p.c.member.Partition(key)
	ctx, cancel := context.WithTimeout(ctx, 10*bodyDeadline)
	defer cancel()
	sent, lost := time.Now(), p.sched.lost.Load()
	before := p.explained(part, sent)
	var waited time.Duration
	judged := false
	err := p.c.member.Do(ctx, key, func(context.Context, partition.Epoch) error {
		now := time.Now()
		waited, judged = p.sched.unexplained(now, sent, lost)
		waited -= p.explained(part, now) - before
		return nil
	})
	if err != nil || !judged || waited <= queueBound {
		return
	}
	_, _ = p.c.env.DB.Exec(ctx, sqlAccountsStall, key, p.c.member.Name(), waited.Milliseconds())
}

// schedule is what a worker's ticker saw of its process's scheduling: the
// last tick, and the time the ticks came late in all (past tickEvery each),
// while the process was paused or descheduled.
type schedule struct {
	last atomic.Int64 // UnixNano of the last tick
	lost atomic.Int64 // nanoseconds the ticks came late, summed
}

// tick records a tick seen at now.
func (s *schedule) tick(now time.Time) {
	prev := s.last.Swap(now.UnixNano())
	if late := now.UnixNano() - prev - int64(tickEvery); prev != 0 && late > 0 {
		s.lost.Add(late)
	}
}

// unexplained returns the part of a wait from sent to now that the ticks
// coming late do not explain (lost was s.lost at sent), and whether it can
// be judged: a tick came within scheduleGap of now, so that no pause or
// descheduling is under way that the ticks have not yet shown.
func (s *schedule) unexplained(now, sent time.Time, lost int64) (time.Duration, bool) {
	judged := now.UnixNano()-s.last.Load() <= int64(scheduleGap)
	return now.Sub(sent) - time.Duration(s.lost.Load()-lost), judged
}

// owns reports whether the member owns key's partition.
func (p *prober) owns(key string) bool {
	part := p.c.member.Partition(key)
	for _, e := range p.c.member.Owned() {
		if e.Partition == part {
			return true
		}
	}
	return false
}

func (p *prober) close() {
	p.cancel()
	p.wg.Wait()
}

// hostile is a worker's hostile client: hostileLoops loops, each sending,
// one after the other, a body that never ends (one byte, then nothing
// until the answer) and one larger than bodyLimit, each to the owner of a
// key at random, until stopped. Neither can be served. With two loops a
// slow body is nearly always on its way to each owner: a member that read
// one on its partition's executor would hold it most of the time.
type hostile struct {
	env    *engine.Env
	member *partition.Member
	http   *http.Client
	cancel context.CancelFunc
	wg     sync.WaitGroup
	sent   atomic.Int64
}

const hostileLoops = 2

// startHostile starts the odd workers' hostile clients; nil for the others.
func startHostile(ctx context.Context, env *engine.Env, m *partition.Member) *hostile {
	if env.Client%2 == 0 {
		return nil
	}
	h := &hostile{env: env, member: m, http: &http.Client{Timeout: 10 * bodyDeadline}}
	ctx, h.cancel = context.WithCancel(context.WithoutCancel(ctx))
	for i := range hostileLoops {
		r := rand.New(rand.NewPCG(uint64(env.Client), 26+uint64(i)))
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			for ctx.Err() == nil {
				key := engine.Key("account-", r.IntN(env.Keys))
				if _, addr := m.Owner(key); addr == "" || !h.send(ctx, addr, key, true) || !h.send(ctx, addr, key, false) {
					engine.Sleep(ctx, 10*time.Millisecond)
				}
			}
		}()
	}
	return h
}

// send sends one hostile request for key to addr: a slow body or a large
// one. It reports whether the request was answered.
func (h *hostile) send(ctx context.Context, addr, key string, slow bool) bool {
	id := fmt.Sprintf("hostile-%d-%d", h.env.Client, h.sent.Add(1))
	var body io.Reader = bytes.NewReader(append([]byte(id), bytes.Repeat([]byte{' '}, bodyLimit)...))
	if slow {
		// A body that never ends: read whenever Forward starts (a member
		// paused past the deadline reads what was sent all at once), it
		// never completes.
		pr, pw := io.Pipe()
		answered := make(chan struct{})
		defer close(answered)
		go func() {
			_, _ = io.WriteString(pw, id[:1])
			select {
			case <-answered:
			case <-ctx.Done():
			}
			_ = pw.CloseWithError(errNoEnd)
		}()
		body = pr
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/accounts/"+key+"/events", body)
	if err != nil {
		return false
	}
	resp, err := h.http.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return true
}

// errNoEnd ends a slow body once its request is answered.
var errNoEnd = errors.New("harness: accounts: the body never ends")

func (h *hostile) close() {
	if h == nil {
		return
	}
	h.cancel()
	h.wg.Wait()
}
