package faultproxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

const (
	// readSize is the most one read takes from a peer.
	readSize = 32 << 10
	// maxQueue bounds the bytes queued in one direction of one connection.
	// Beyond it the proxy stops reading and TCP flow control stalls the
	// sender, as a real network would.
	maxQueue = 4 << 20
	// dialTimeout bounds a dial to the target.
	dialTimeout = 5 * time.Second
)

// conn is one proxied connection: the client it accepted, the target it
// dialled, and a pipe each way. Every read is queued and every write taken
// from the queue, so a fault can hold or drop bytes without stalling the
// sender.
type conn struct {
	p      *Proxy
	client *net.TCPConn
	up     *pipe // client → target
	down   *pipe // target → client
	ctx    context.Context
	cancel context.CancelFunc // with teardown: stops every goroutine's wait

	// Guarded by p.mu.
	server *net.TCPConn // nil until the gate lets the dial through
	closed bool
	// losing: this connection sent LoseReply's request; the target's next
	// bytes are dropped and the connection reset.
	losing bool
}

func newConn(p *Proxy, client *net.TCPConn) *conn {
	ctx, cancel := context.WithCancel(p.ctx)
	c := &conn{p: p, client: client, ctx: ctx, cancel: cancel}
	c.up = &pipe{c: c, up: true, wake: make(chan struct{}, 1), space: make(chan struct{}, 1)}
	c.down = &pipe{c: c, wake: make(chan struct{}, 1), space: make(chan struct{}, 1)}
	return c
}

// serve runs the connection until both directions have ended or it is torn
// down. The client's bytes are read, and queued, from the start: a client
// that connects during a hold gets its connection and its writes return.
func (c *conn) serve() {
	defer c.p.wg.Done()
	var readers, writers sync.WaitGroup
	readers.Go(func() { c.up.read(c.client) })
	server, ok := c.dial()
	if ok {
		readers.Go(func() { c.down.read(server) })
		writers.Go(func() { c.up.write(server) })
		writers.Go(func() { c.down.write(c.client) })
		writers.Wait()
	}
	c.teardown(false)
	readers.Wait()
}

// dial waits for the gate to open, then dials the target. A failed dial
// resets the client, as the target refusing would.
func (c *conn) dial() (*net.TCPConn, bool) {
	if !c.up.await(func() bool { return c.p.mode != Hold }) {
		return nil, false
	}
	d := net.Dialer{Timeout: dialTimeout}
	nc, err := d.DialContext(c.ctx, "tcp", c.p.target)
	if err != nil {
		c.teardown(true)
		return nil, false
	}
	server := nc.(*net.TCPConn)
	c.p.mu.Lock()
	if c.closed {
		c.p.mu.Unlock()
		server.Close()
		return nil, false
	}
	c.server = server
	c.p.mu.Unlock()
	return server, true
}

// teardown closes both sides, with an RST when reset, and reports whether
// this call did it. Bytes still queued are dropped.
func (c *conn) teardown(reset bool) bool {
	p := c.p
	p.mu.Lock()
	if c.closed {
		p.mu.Unlock()
		return false
	}
	c.closed = true
	delete(p.conns, c)
	p.stats.Live--
	c.up.dropLocked()
	c.down.dropLocked()
	if reset {
		p.stats.Resets++
	}
	server := c.server
	p.mu.Unlock()

	c.cancel()
	for _, tc := range []*net.TCPConn{c.client, server} {
		if tc == nil {
			continue
		}
		if reset {
			tc.SetLinger(0)
		}
		tc.Close()
	}
	return true
}

// pipe carries one direction: read queues what src sends, write sends the
// queue to dst as the mode allows.
type pipe struct {
	c  *conn
	up bool

	// Guarded by c.p.mu.
	queue  []chunk
	queued int
	eof    bool // src ended cleanly: half-close dst once the queue is sent
	failed bool // src failed: reset the connection once the queue is sent

	wake  chan struct{} // to the writer (or the dial): bytes queued or mode changed
	space chan struct{} // to the reader: the queue shrank
}

type chunk struct {
	b  []byte
	at time.Time // when it was read
}

// notify wakes the pipe's writer; it never blocks.
func (pp *pipe) notify() {
	select {
	case pp.wake <- struct{}{}:
	default:
	}
}

// await waits, under the proxy's lock, until ready holds, and reports false
// once the connection is torn down.
func (pp *pipe) await(ready func() bool) bool {
	p := pp.c.p
	for {
		p.mu.Lock()
		closed, ok := pp.c.closed, ready()
		p.mu.Unlock()
		if closed {
			return false
		}
		if ok {
			return true
		}
		select {
		case <-pp.wake:
		case <-pp.c.ctx.Done():
			return false
		}
	}
}

func (pp *pipe) read(src *net.TCPConn) {
	buf := make([]byte, readSize)
	for {
		if !pp.waitSpace() {
			return
		}
		n, err := src.Read(buf)
		if n > 0 {
			pp.push(buf[:n])
		}
		if err != nil {
			pp.end(err)
			return
		}
	}
}

func (pp *pipe) waitSpace() bool {
	p := pp.c.p
	for {
		p.mu.Lock()
		full := pp.queued >= maxQueue
		p.mu.Unlock()
		if !full {
			return true
		}
		select {
		case <-pp.space:
		case <-pp.c.ctx.Done():
			return false
		}
	}
}

// push queues a copy of b, or drops it in a blackhole.
func (pp *pipe) push(b []byte) {
	p := pp.c.p
	p.mu.Lock()
	defer p.mu.Unlock()
	n := int64(len(b))
	if pp.c.closed || p.mode == Blackhole {
		p.stats.Dropped += n
		return
	}
	pp.queue = append(pp.queue, chunk{b: append([]byte(nil), b...), at: time.Now()})
	pp.queued += len(b)
	p.stats.Queued += n
	if p.mode == Hold {
		p.holding += n
		p.stats.Held += n
	}
	pp.notify()
}

// end records how src ended: a clean end is passed on as a half-close, any
// other as a reset, after the bytes queued before it.
func (pp *pipe) end(err error) {
	p := pp.c.p
	p.mu.Lock()
	if errors.Is(err, io.EOF) {
		pp.eof = true
	} else {
		pp.failed = true
	}
	p.mu.Unlock()
	pp.notify()
}

// action is what a pipe's writer does next.
type action int

const (
	send      action = iota // write the chunk
	halfClose               // src ended cleanly: CloseWrite dst
	abort                   // src failed: reset the connection
	stop                    // the connection is torn down
)

// write sends the queue to dst until src ends or the connection is torn
// down. A failed write resets the connection: the bytes are lost, and the
// client must learn it.
func (pp *pipe) write(dst *net.TCPConn) {
	for {
		ch, act := pp.next()
		switch act {
		case send:
			n, err := dst.Write(ch.b)
			if err != nil {
				pp.unsent(len(ch.b) - n)
				pp.c.teardown(true)
				return
			}
		case halfClose:
			dst.CloseWrite()
			return
		case abort:
			pp.c.teardown(true)
			return
		case stop:
			return
		}
	}
}

// next waits for what the writer does next: until the mode lets the head of
// the queue go, or the connection ends.
func (pp *pipe) next() (chunk, action) {
	p := pp.c.p
	for {
		p.mu.Lock()
		ch, act, wait := pp.takeLocked()
		p.mu.Unlock()
		if wait == 0 {
			return ch, act
		}
		if !pp.sleep(wait) {
			return chunk{}, stop
		}
	}
}

// forever is the wait of a writer with nothing it may send yet.
const forever time.Duration = -1

// takeLocked decides the writer's next step under the current mode. A
// non-zero wait means nothing can be done before it (or a wake-up).
func (pp *pipe) takeLocked() (chunk, action, time.Duration) {
	p := pp.c.p
	if pp.c.closed {
		return chunk{}, stop, 0
	}
	switch p.mode {
	case Hold, Reset:
		// Reset: the connection is being torn down.
		return chunk{}, 0, forever
	case Blackhole:
		// The end of the stream waits for the network to heal, as a FIN
		// retransmitted through a partition would.
		pp.dropLocked()
		return chunk{}, 0, forever
	}
	if !pp.up && pp.c.losing && len(pp.queue) > 0 {
		// The target's answer: it got the request. The client never does.
		pp.dropLocked()
		p.stats.LostReplies++
		p.stats.Faults++
		return chunk{}, abort, 0
	}
	if len(pp.queue) == 0 {
		switch {
		case pp.eof:
			return chunk{}, halfClose, 0
		case pp.failed:
			return chunk{}, abort, 0
		}
		return chunk{}, 0, forever
	}
	head := pp.queue[0]
	if p.mode == Delay {
		if wait := time.Until(head.at.Add(p.delay)); wait > 0 {
			return chunk{}, 0, wait
		}
	}
	if pp.up && p.lose != nil && bytes.Contains(head.b, p.lose) {
		// Marked before the request is written: its answer cannot come
		// back before this connection knows to lose it.
		pp.c.losing, p.lose = true, nil
	}
	pp.queue[0] = chunk{}
	pp.queue = pp.queue[1:]
	pp.queued -= len(head.b)
	p.stats.Queued -= int64(len(head.b))
	// Counted as forwarded before the write, so that Stats never shows
	// fewer bytes than a peer has received; a failed write takes back what
	// it did not send.
	if pp.up {
		p.stats.Upstream += int64(len(head.b))
	} else {
		p.stats.Downstream += int64(len(head.b))
	}
	pp.signalSpace()
	return head, send, 0
}

// sleep waits d (forever: until woken) or a wake-up, and reports false once
// the connection is torn down.
func (pp *pipe) sleep(d time.Duration) bool {
	var timeout <-chan time.Time
	if d != forever {
		t := time.NewTimer(d)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-pp.wake:
	case <-timeout:
	case <-pp.c.ctx.Done():
		return false
	}
	return true
}

// dropLocked drops the queue: into a blackhole, or with its connection.
func (pp *pipe) dropLocked() {
	if pp.queued == 0 {
		return
	}
	p := pp.c.p
	p.stats.Dropped += int64(pp.queued)
	p.stats.Queued -= int64(pp.queued)
	pp.queue, pp.queued = nil, 0
	pp.signalSpace()
}

func (pp *pipe) signalSpace() {
	select {
	case pp.space <- struct{}{}:
	default:
	}
}

// unsent counts the bytes a failed write did not send as dropped.
func (pp *pipe) unsent(n int) {
	p := pp.c.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if pp.up {
		p.stats.Upstream -= int64(n)
	} else {
		p.stats.Downstream -= int64(n)
	}
	p.stats.Dropped += int64(n)
}
