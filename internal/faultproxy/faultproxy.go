// Package faultproxy is a TCP proxy that injects network faults between
// clients and one server (PostgreSQL, Kafka). Tests and `lockfree compare`
// put one proxy in front of the server per client or worker, so that one can
// be cut off while the others go on.
//
// A proxy is in one Mode at a time, switched with Set and healed with
// Set(Pass, 0) or Deliver:
//
//   - Hold stops forwarding in both directions and keeps every byte: the
//     peers' writes still return, connections stay open, new connections are
//     accepted and held too. Deliver opens the gate: the held bytes arrive
//     late and in order, like the delayed packets of a partition that heals,
//     and a paused writer's requests land after the fact.
//   - Blackhole drops bytes silently while connections stay open.
//   - Delay forwards each chunk no earlier than a fixed time after it was read.
//   - Reset closes every connection with an RST (SO_LINGER 0: the peer sees
//     ECONNRESET) and resets each new one until the mode changes;
//     ResetConns resets the live ones only.
//
// LoseReply, beside the mode, loses the answer to one request: the request
// reaches the target, which acts on it, and the client's connection is reset
// before the answer reaches it — a COMMIT whose outcome the client never
// learns.
//
// Stats counts connections and bytes, so a test can tell a fault that bit
// from one that injected nothing.
//
// A Kafka client given a proxy as its bootstrap address still dials the
// brokers that metadata advertises, past the proxy: route every dial through
// proxies with Redirect.
package faultproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"sync"
	"time"

	"github.com/lockfree-go/lockfree/internal/short"
)

var (
	// ErrInvalid is returned, wrapped, for an unusable target or URL.
	ErrInvalid = errors.New("faultproxy: invalid argument")
	// ErrBypass is returned, wrapped, by a Redirect dial to an address that
	// has no proxy.
	ErrBypass = errors.New("faultproxy: address not behind a proxy")
)

// Mode is what the proxy does to the traffic between its clients and the
// target.
type Mode int

const (
	// Pass forwards traffic.
	Pass Mode = iota
	// Delay forwards each chunk no earlier than the delay after it was read.
	Delay
	// Blackhole drops every byte, and those still queued, silently; the
	// connections stay open.
	Blackhole
	// Reset resets every live connection and each new one.
	Reset
	// Hold keeps every byte, in both directions, until Deliver or another
	// mode opens the gate. New connections are accepted and held too: the
	// target is dialled only when the gate opens.
	Hold
)

func (m Mode) String() string {
	switch m {
	case Pass:
		return "pass"
	case Delay:
		return "delay"
	case Blackhole:
		return "blackhole"
	case Reset:
		return "reset"
	case Hold:
		return "hold"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Stats counts what a proxy has done since it started. Every byte read is
// counted in exactly one of Upstream or Downstream (forwarded, counted as the
// write begins: a peer never holds a byte that Stats does not count), Queued
// or Dropped.
type Stats struct {
	// Accepted counts the connections accepted, including those reset at once.
	Accepted int64
	// Live counts the connections open now.
	Live int64
	// Upstream counts the bytes forwarded from clients to the target.
	Upstream int64
	// Downstream counts the bytes forwarded from the target to clients.
	Downstream int64
	// Queued counts the bytes read and waiting now, behind a hold or a delay.
	Queued int64
	// Held counts the bytes that holds stopped, all holds together: those
	// queued when a hold began and those read during it.
	Held int64
	// Dropped counts the bytes read and never delivered: blackholed, or
	// queued when their connection was reset or closed.
	Dropped int64
	// Resets counts the connections the proxy reset, for a Reset fault or to
	// pass a peer's reset on.
	Resets int64
	// Faults counts the faults injected: Set to a mode other than Pass,
	// ResetConns, and each answer LoseReply lost.
	Faults int64
	// LostReplies counts the answers LoseReply lost: the target answered
	// the request, and its connection was reset instead.
	LostReplies int64
}

// Proxy forwards the connections it accepts on Addr to its target. Create it
// with Start (the zero value is not usable) and Close it when done. Its
// methods are safe for concurrent use.
type Proxy struct {
	ln     *net.TCPListener
	target string
	ctx    context.Context // cancelled by Close: aborts pending dials
	cancel context.CancelFunc
	wg     sync.WaitGroup // the accept loop and every connection's goroutines

	mu       sync.Mutex
	mode     Mode
	delay    time.Duration
	conns    map[*conn]struct{}
	holding  int64  // bytes held by the current hold
	lose     []byte // LoseReply's request, until a client sends it
	stats    Stats
	closed   bool
	closeErr error
}

// Start listens on a free loopback port and forwards to target (host:port),
// passing traffic until told otherwise.
func Start(target string) (*Proxy, error) {
	if _, _, err := net.SplitHostPort(target); err != nil {
		return nil, fmt.Errorf("%w: target %s: %v", ErrInvalid, short.Quote(target), err)
	}
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{ln: ln, target: target, ctx: ctx, cancel: cancel, conns: map[*conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Set switches the proxy's mode; delay matters only for Delay, and a
// negative one counts as none. Leaving Hold delivers the held bytes under the
// new mode: in order for Pass and Delay, dropped for Blackhole, discarded
// with their connections for Reset. Switching to Reset resets every live
// connection before Set returns. Set panics on an unknown mode.
func (p *Proxy) Set(mode Mode, delay time.Duration) {
	if mode < Pass || mode > Hold {
		panic(fmt.Sprintf("faultproxy: unknown mode %d", int(mode)))
	}
	p.mu.Lock()
	p.setLocked(mode, max(delay, 0))
	p.mu.Unlock()
	if mode == Reset {
		p.resetLive()
	}
}

// Deliver ends a hold: the proxy passes traffic again, the held bytes first
// and in order. It returns how many bytes the hold held; 0 means the hold
// injected nothing (no traffic crossed it). Outside a hold it is
// Set(Pass, 0) and returns 0.
func (p *Proxy) Deliver() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var held int64
	if p.mode == Hold {
		held = p.holding
	}
	p.setLocked(Pass, 0)
	return held
}

// ResetConns resets every live connection, leaving the mode as it is: new
// connections go through. It returns how many it reset.
func (p *Proxy) ResetConns() int {
	p.mu.Lock()
	p.stats.Faults++
	p.mu.Unlock()
	return p.resetLive()
}

// PostgresCommit is the request a pgx client sends to commit a transaction
// (pgx.Tx.Commit: a simple-protocol Query message, "commit"): give it to
// LoseReply to lose the outcome of a proxied client's next COMMIT.
var PostgresCommit = []byte("Q\x00\x00\x00\x0bcommit\x00")

// PostgresExecute is the Execute message a pgx client sends to run a
// statement with the extended protocol (the unnamed portal, no row limit),
// in the write that carries the statement's Bind and Sync: give it to
// LoseReply to lose the answer to a proxied client's next statement.
var PostgresExecute = []byte("E\x00\x00\x00\x09\x00\x00\x00\x00\x00")

// LoseReply arms the proxy to lose the answer to the next request a client
// sends that contains req, on whichever connection sends it first: the
// request is forwarded; the first bytes the target sends back on that
// connection afterwards (its answer, which proves the request arrived and
// was acted on) are dropped and the connection is reset, on both sides. The
// client sees ECONNRESET and cannot tell whether the request took effect —
// for a PostgreSQL COMMIT, it did. It acts once: LoseReply arms it again,
// LoseReply(nil) disarms it. req must arrive within one read, as a short
// request sent in one write does; it is matched only while traffic passes
// (Pass or Delay). Stats.LostReplies counts the answers lost.
func (p *Proxy) LoseReply(req []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lose = bytes.Clone(req)
}

// Mode returns the current mode.
func (p *Proxy) Mode() Mode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode
}

// Stats returns the proxy's counters.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// Close stops listening, closes every connection, discarding the bytes still
// queued, and waits for the proxy's goroutines. Calling it again returns the
// first call's result.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return p.closeErr
	}
	p.closed = true
	conns := p.liveLocked()
	p.mu.Unlock()

	p.cancel()
	err := p.ln.Close()
	for _, c := range conns {
		c.teardown(false)
	}
	p.wg.Wait()
	p.mu.Lock()
	p.closeErr = err
	p.mu.Unlock()
	return err
}

func (p *Proxy) setLocked(mode Mode, delay time.Duration) {
	if mode != Pass {
		p.stats.Faults++
	}
	if mode == Hold && p.mode != Hold {
		// Bytes already queued (behind a delay, or not yet written) are
		// stopped by this hold too.
		p.holding = p.stats.Queued
		p.stats.Held += p.stats.Queued
	}
	p.mode, p.delay = mode, delay
	for c := range p.conns {
		c.up.notify()
		c.down.notify()
	}
}

func (p *Proxy) liveLocked() []*conn {
	conns := make([]*conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	return conns
}

func (p *Proxy) resetLive() int {
	p.mu.Lock()
	conns := p.liveLocked()
	p.mu.Unlock()
	n := 0
	for _, c := range conns {
		if c.teardown(true) {
			n++
		}
	}
	return n
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	backoff := 5 * time.Millisecond
	for {
		client, err := p.ln.AcceptTCP()
		if err != nil {
			if p.ctx.Err() != nil {
				return
			}
			// Out of file descriptors, most likely: wait for some to free
			// up rather than spin or give up.
			select {
			case <-p.ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
		p.admit(client)
	}
}

// admit starts serving client, or resets it when the proxy is resetting.
func (p *Proxy) admit(client *net.TCPConn) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		client.Close()
		return
	}
	p.stats.Accepted++
	if p.mode == Reset {
		p.stats.Resets++
		p.mu.Unlock()
		client.SetLinger(0)
		client.Close()
		return
	}
	c := newConn(p, client)
	p.conns[c] = struct{}{}
	p.stats.Live++
	p.wg.Add(1)
	p.mu.Unlock()
	go c.serve()
}

// Redirect returns a dial function that dials routes[address] (a proxy's
// Addr) in place of address, and refuses, with ErrBypass, any address not in
// routes. It is for clients that learn server addresses from the server:
// Kafka clients dial the brokers that metadata advertises, which would slip
// past a proxy given only as the bootstrap address. Give it to
// kafka.Transport.Dial or kafka.Dialer.DialFunc, with a proxy per broker.
func Redirect(routes map[string]string) func(ctx context.Context, network, address string) (net.Conn, error) {
	routes = maps.Clone(routes)
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		via, ok := routes[address]
		if !ok {
			return nil, fmt.Errorf("%w: %s", ErrBypass, short.Quote(address))
		}
		var d net.Dialer
		return d.DialContext(ctx, network, via)
	}
}
