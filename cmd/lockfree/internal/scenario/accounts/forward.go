package accounts

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

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
	// queueBound is the longest an operation's call may wait for its
	// partition's executor, in a run whose executors run nothing but the
	// operations' calls, one at a time per member: a wait past it is
	// another request holding the executor.
	queueBound = bodyDeadline / 3
	// scheduleGap is how long the worker's ticker may miss ticking: a
	// longer gap is a paused or descheduled process, and a call that
	// waited across it is not judged.
	scheduleGap = 25 * time.Millisecond
)

// metaQueued, on an append, is how long (ms) its call waited for its
// partition's executor past queueBound, while nothing else of the
// operations ran there and the worker was never paused.
const metaQueued = "queued-ms"

// stalled is a call on a partition's executor held past queueBound by a
// request that is none of the operations: a slow request body read on the
// executor.
const stalled history.Anomaly = "stall"

// stalls adds to rep a violation for each append whose call waited for its
// executor (metaQueued).
func stalls(ops []history.Op, rep *history.Findings) {
	for _, op := range ops {
		if ms, ok := op.Meta[metaQueued]; ok {
			rep.Add(history.Violation{Key: op.Key, Anomaly: stalled, Marks: []history.Mark{{Op: op, Role: history.Clobbered}},
				Text: fmt.Sprintf("append %s to %s waited %s ms for its partition's executor, which ran no other operation: a request held it", op.ID(), op.Key, ms)})
		}
	}
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

// queueWatch judges how long the operations' calls wait for their
// executor: it knows whether one of them is still running (a call whose
// operation ended while it ran) and whether the worker was paused or
// descheduled (a ticker that missed its ticks).
type queueWatch struct {
	running atomic.Int32 // calls of operations on an executor
	tick    atomic.Int64 // the last tick (UnixNano)
	late    atomic.Int64 // the last tick that came scheduleGap late
	stop    chan struct{}
	done    chan struct{}
}

func newQueueWatch() *queueWatch {
	q := &queueWatch{stop: make(chan struct{}), done: make(chan struct{})}
	q.tick.Store(time.Now().UnixNano())
	go func() {
		defer close(q.done)
		t := time.NewTicker(scheduleGap / 5)
		defer t.Stop()
		for {
			select {
			case <-q.stop:
				return
			case now := <-t.C:
				if prev := q.tick.Swap(now.UnixNano()); now.UnixNano()-prev > int64(scheduleGap) {
					q.late.Store(now.UnixNano())
				}
			}
		}
	}()
	return q
}

func (q *queueWatch) close() {
	close(q.stop)
	<-q.done
}

// call is one call of an operation on its executor, sent at called.
type call struct {
	q       *queueWatch
	called  time.Time
	judged  bool // nothing else of the operations ran, and the worker ran
	waited  time.Duration
	started bool
}

// begin is when the call is sent.
func (q *queueWatch) begin() *call {
	return &call{q: q, called: time.Now(), judged: q.running.Load() == 0}
}

// run is the call's start on the executor; end, deferred, is its end.
func (c *call) run() (end func()) {
	now := time.Now()
	c.waited, c.started = now.Sub(c.called), true
	if now.UnixNano()-c.q.tick.Load() > int64(scheduleGap) {
		c.judged = false
	}
	c.q.running.Add(1)
	return func() { c.q.running.Add(-1) }
}

// note sets metaQueued on op for a judged call that waited past
// queueBound.
func (c *call) note(op *engine.Invocation) {
	if c.started && c.judged && c.q.late.Load() < c.called.UnixNano() && c.waited > queueBound {
		op.Set(metaQueued, strconv.FormatInt(c.waited.Milliseconds(), 10))
	}
}

// hostile is a worker's hostile client: it sends, one after the other, a
// body that trickles past bodyDeadline and one larger than bodyLimit, each
// to the owner of a key at random, until stopped.
type hostile struct {
	env    *engine.Env
	member *partition.Member
	rand   *rand.Rand
	http   *http.Client
	cancel context.CancelFunc
	wg     sync.WaitGroup
	sent   int
}

// startHostile starts the odd workers' hostile clients; nil for the others.
func startHostile(ctx context.Context, env *engine.Env, m *partition.Member) *hostile {
	if env.Client%2 == 0 {
		return nil
	}
	h := &hostile{env: env, member: m, rand: rand.New(rand.NewPCG(uint64(env.Client), 26)),
		http: &http.Client{Timeout: 10 * bodyDeadline}}
	ctx, h.cancel = context.WithCancel(context.WithoutCancel(ctx))
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		for ctx.Err() == nil {
			key := engine.Key("account-", h.rand.IntN(env.Keys))
			if _, addr := m.Owner(key); addr == "" || !h.send(ctx, addr, key, true) || !h.send(ctx, addr, key, false) {
				engine.Sleep(ctx, 10*time.Millisecond)
			}
		}
	}()
	return h
}

// send sends one hostile request for key to addr: a slow body or a large
// one. It reports whether the request was answered.
func (h *hostile) send(ctx context.Context, addr, key string, slow bool) bool {
	h.sent++
	id := fmt.Sprintf("hostile-%d-%d", h.env.Client, h.sent)
	var body io.Reader = bytes.NewReader(append([]byte(id), bytes.Repeat([]byte{' '}, bodyLimit)...))
	if slow {
		pr, pw := io.Pipe()
		defer pr.Close()
		go func() {
			_, _ = io.WriteString(pw, id[:1])
			engine.Sleep(ctx, 2*bodyDeadline)
			_, _ = io.WriteString(pw, id[1:])
			_ = pw.Close()
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

func (h *hostile) close() {
	if h == nil {
		return
	}
	h.cancel()
	h.wg.Wait()
}
