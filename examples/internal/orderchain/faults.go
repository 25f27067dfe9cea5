package orderchain

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/internal/failpoint"
	"github.com/lockfree-go/lockfree/internal/faultproxy"
)

// LostHTTP is an http.RoundTripper that delivers every request, and loses
// the answer to the first one whose body contains Marker: the server ran
// it, the client sees a broken connection.
type LostHTTP struct {
	Base   http.RoundTripper // defaults to http.DefaultTransport
	Marker string
	lost   atomic.Int64
}

// RoundTrip implements http.RoundTripper.
func (l *LostHTTP) RoundTrip(req *http.Request) (*http.Response, error) {
	base := l.Base
	if base == nil {
		base = http.DefaultTransport
	}
	marked := false
	if req.GetBody != nil && l.Marker != "" {
		if body, err := req.GetBody(); err == nil {
			b, _ := io.ReadAll(body)
			marked = bytes.Contains(b, []byte(l.Marker))
		}
	}
	resp, err := base.RoundTrip(req)
	if err == nil && marked && l.lost.CompareAndSwap(0, 1) {
		_, _ = io.Copy(io.Discard, resp.Body) // the server answered in full
		resp.Body.Close()
		return nil, errors.New("orderchain: connection reset by peer (answer lost)")
	}
	return resp, err
}

// Lost is how many answers l lost: 0 or 1.
func (l *LostHTTP) Lost() int64 { return l.lost.Load() }

// Kafka puts a fault proxy in front of each broker. A client whose
// Transport is k.Transport reaches the brokers only through them.
type Kafka struct {
	Transport *kafka.Transport
	proxies   []*faultproxy.Proxy
}

// NewKafka starts a proxy per broker.
func NewKafka(brokers []string) (*Kafka, error) {
	k := &Kafka{}
	routes := map[string]string{}
	for _, b := range brokers {
		px, err := faultproxy.Start(b)
		if err != nil {
			k.Close()
			return nil, err
		}
		k.proxies = append(k.proxies, px)
		routes[b] = px.Addr()
	}
	k.Transport = &kafka.Transport{Dial: faultproxy.Redirect(routes)}
	return k, nil
}

// LoseAnswer loses the answer to the next request that contains marker (a
// produce request carrying a record with it): the broker writes the
// records, the client's connection breaks before it learns so.
func (k *Kafka) LoseAnswer(marker string) {
	for _, px := range k.proxies {
		px.LoseReply([]byte(marker))
	}
}

// Lost is how many answers the proxies lost.
func (k *Kafka) Lost() (n int64) {
	for _, px := range k.proxies {
		n += px.Stats().LostReplies
	}
	return n
}

// Close closes the transport's connections and the proxies.
func (k *Kafka) Close() {
	if k.Transport != nil {
		k.Transport.CloseIdleConnections()
	}
	for _, px := range k.proxies {
		px.Close()
	}
}

// Postgres is a pool whose connections pass through a fault proxy.
type Postgres struct {
	Pool  *pgxpool.Pool
	proxy *faultproxy.Proxy
	armed atomic.Bool
}

// NewPostgres opens a pool like db's (same user, database, search_path)
// whose connections go through a proxy of its own.
func NewPostgres(ctx context.Context, db *pgxpool.Pool) (*Postgres, error) {
	cfg := db.Config()
	px, err := faultproxy.Start(net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))))
	if err != nil {
		return nil, err
	}
	host, port, _ := net.SplitHostPort(px.Addr())
	p, _ := strconv.Atoi(port)
	cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Fallbacks = host, uint16(p), nil
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		px.Close()
		return nil, err
	}
	return &Postgres{Pool: pool, proxy: px}, nil
}

// LoseCommitOf wraps a consumer's handler: the COMMIT of the first
// transaction that handles the event of item ("" for none) commits, and
// its answer is lost. The consumer must be the pool's only user.
func (p *Postgres) LoseCommitOf(item string, h func(context.Context, pgx.Tx, kafka.Message) error) func(context.Context, pgx.Tx, kafka.Message) error {
	return func(ctx context.Context, tx pgx.Tx, msg kafka.Message) error {
		if item != "" && bytes.Contains(msg.Value, []byte(itemJSON(item))) && p.armed.CompareAndSwap(false, true) {
			p.proxy.LoseReply(faultproxy.PostgresCommit) // this transaction's
		}
		return h(ctx, tx, msg)
	}
}

// Lost is how many answers the proxy lost.
func (p *Postgres) Lost() int64 { return p.proxy.Stats().LostReplies }

// Close closes the pool and the proxy.
func (p *Postgres) Close() {
	p.Pool.Close()
	p.proxy.Close()
}

// Pause pauses a relay past its lease: a relay started with Context
// stops after its next publish, before its delete, once AtDelete armed the
// pause; its membership heartbeats stop with it, until Resume.
type Pause struct {
	mu      sync.Mutex
	gate    chan struct{} // closed by Resume; nil while running
	armed   bool
	reached chan struct{} // closed when the relay paused
	paused  atomic.Bool
}

type pauseKey struct{}

var installOnce sync.Once

// Context returns ctx marked with p: give it to the relay's Start.
func (p *Pause) Context(ctx context.Context) context.Context {
	installOnce.Do(func() { failpoint.Handle(atPoint) })
	return context.WithValue(ctx, pauseKey{}, p)
}

// atPoint is the process's failpoint handler: it acts only for relays
// started with a Pause's context.
func atPoint(ctx context.Context, name string) {
	p, ok := ctx.Value(pauseKey{}).(*Pause)
	if !ok {
		return
	}
	switch name {
	case "partition.member.heartbeat", "partition.member.reconcile":
		p.wait()
	case "outbox.relay.before-mark":
		p.mu.Lock()
		if p.armed {
			p.armed, p.gate = false, make(chan struct{})
			p.paused.Store(true)
			close(p.reached)
		}
		p.mu.Unlock()
		p.wait()
	}
}

// AtDelete arms the pause for the relay's next batch.
func (p *Pause) AtDelete() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed, p.reached = true, make(chan struct{})
}

// Reached waits until the relay has published its batch and paused before
// deleting it.
func (p *Pause) Reached(ctx context.Context) error {
	p.mu.Lock()
	reached := p.reached
	p.mu.Unlock()
	if reached == nil {
		return errors.New("orderchain: the pause is not armed")
	}
	select {
	case <-reached:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the relay to pause: %w", context.Cause(ctx))
	}
}

// Resume ends the pause.
func (p *Pause) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gate != nil {
		close(p.gate)
		p.gate = nil
	}
}

// Paused reports whether the relay paused.
func (p *Pause) Paused() bool { return p.paused.Load() }

func (p *Pause) wait() {
	p.mu.Lock()
	gate := p.gate
	p.mu.Unlock()
	if gate != nil {
		<-gate
	}
}

// Until polls cond every 20ms until it holds, cond fails, or ctx ends;
// what names the condition in the error.
func Until(ctx context.Context, what string, cond func(ctx context.Context) (bool, error)) error {
	for {
		ok, err := cond(ctx)
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting until %s: %w", what, context.Cause(ctx))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Records returns how many records partition 0 of topic holds: its high
// watermark.
func Records(ctx context.Context, brokers []string, topic string) (int64, error) {
	conn, err := kafka.DialLeader(ctx, "tcp", brokers[0], topic, 0)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	return conn.ReadLastOffset()
}
