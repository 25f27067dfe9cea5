package faultproxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// patience bounds every wait for a condition: generous, since the machine
// may be busy.
const patience = 60 * time.Second

// server is a TCP server on loopback. An echo server writes back what it
// reads and closes once the client has half-closed; otherwise the test gets
// each accepted connection from Next and drives it.
type server struct {
	ln       net.Listener
	echo     bool
	accepted atomic.Int64
	received atomic.Int64
	conns    chan net.Conn
	wg       sync.WaitGroup
}

func newServer(t *testing.T, echo bool) *server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &server{ln: ln, echo: echo, conns: make(chan net.Conn, 1000)}
	var live sync.Map
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.accepted.Add(1)
			live.Store(c, nil)
			if !echo {
				s.conns <- c
				continue
			}
			s.wg.Go(func() {
				defer c.Close()
				io.Copy(c, countingReader{c, &s.received})
				c.(*net.TCPConn).CloseWrite()
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		live.Range(func(c, _ any) bool { c.(net.Conn).Close(); return true })
		s.wg.Wait()
	})
	return s
}

func (s *server) Addr() string { return s.ln.Addr().String() }

// Next returns the next connection the server accepted; its reads and
// writes fail rather than hang past patience.
func (s *server) Next(t *testing.T) net.Conn {
	t.Helper()
	select {
	case c := <-s.conns:
		c.SetDeadline(time.Now().Add(patience))
		return c
	case <-time.After(patience):
		t.Fatal("the server accepted no connection")
		return nil
	}
}

type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n.Add(int64(n))
	return n, err
}

func start(t *testing.T, target string) *Proxy {
	t.Helper()
	p, err := Start(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// dial connects to addr; reads and writes fail rather than hang past
// patience.
func dial(t *testing.T, addr string) *net.TCPConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(patience))
	return c.(*net.TCPConn)
}

// waitFor polls cond until it holds, and fails the test after patience.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func write(t *testing.T, c net.Conn, s string) {
	t.Helper()
	if _, err := io.WriteString(c, s); err != nil {
		t.Fatalf("write: %v", err)
	}
}

// expect reads len(want) bytes from c and fails unless they are want.
func expect(t *testing.T, c net.Conn, want string) {
	t.Helper()
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("reading %d bytes: %v (got %q)", len(want), err, got)
	}
	if string(got) != want {
		t.Fatalf("read %q, want %q", got, want)
	}
}

// expectReset reads from c and fails unless the connection was reset.
func expectReset(t *testing.T, c net.Conn) {
	t.Helper()
	_, err := c.Read(make([]byte, 1))
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read after a reset: %v, want ECONNRESET", err)
	}
}

// expectResetDial dials addr and fails unless the connection is reset: the
// kernel completes the handshake before the proxy accepts, so the reset
// fails either the dial or the first read.
func expectResetDial(addr string) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		if !errors.Is(err, syscall.ECONNRESET) {
			return fmt.Errorf("dial: %w, want ECONNRESET", err)
		}
		return nil
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(patience))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
		return fmt.Errorf("read: %v, want ECONNRESET", err)
	}
	return nil
}

// messages returns n numbered lines, so that a loss or a reordering shows.
func messages(n int) []string {
	ms := make([]string, n)
	for i := range ms {
		ms[i] = fmt.Sprintf("message %04d\n", i)
	}
	return ms
}

func TestPass(t *testing.T) {
	t.Parallel()
	srv := newServer(t, true)
	p := start(t, srv.Addr())
	c := dial(t, p.Addr())
	write(t, c, "ping")
	expect(t, c, "ping")
	st := p.Stats()
	if st.Accepted != 1 || st.Live != 1 || st.Upstream != 4 || st.Downstream != 4 || st.Faults != 0 {
		t.Fatalf("stats %+v", st)
	}
	// A client's half-close reaches the server, and the server's close
	// comes back.
	c.CloseWrite()
	if n, err := c.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("read after half-close = %d, %v; want EOF", n, err)
	}
	waitFor(t, "the connection to end", func() bool { return p.Stats().Live == 0 })
}

// Held bytes arrive after the hold, in order, after those sent before it,
// and the connection stays usable.
func TestHoldDeliver(t *testing.T) {
	t.Parallel()
	srv := newServer(t, true)
	p := start(t, srv.Addr())
	c := dial(t, p.Addr())
	write(t, c, "before\n")
	expect(t, c, "before\n")

	p.Set(Hold, 0)
	ms := messages(200)
	var want bytes.Buffer
	for _, m := range ms {
		write(t, c, m) // returns: the proxy keeps reading
		want.WriteString(m)
	}
	waitFor(t, "the proxy to hold every byte", func() bool { return p.Stats().Held == int64(want.Len()) })
	if got := srv.received.Load(); got != int64(len("before\n")) {
		t.Fatalf("the server received %d bytes during the hold, want only the %d sent before it", got, len("before\n"))
	}
	if held := p.Deliver(); held != int64(want.Len()) {
		t.Fatalf("Deliver = %d, want %d", held, want.Len())
	}
	expect(t, c, want.String())
	write(t, c, "after\n")
	expect(t, c, "after\n")
	st := p.Stats()
	if st.Queued != 0 || st.Dropped != 0 || st.Upstream != int64(want.Len()+13) || st.Faults != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// The server's bytes are held too.
func TestHoldDownstream(t *testing.T) {
	t.Parallel()
	srv := newServer(t, false)
	p := start(t, srv.Addr())
	c := dial(t, p.Addr())
	write(t, c, "hello")
	s := srv.Next(t)
	expect(t, s, "hello")

	p.Set(Hold, 0)
	write(t, s, "late reply")
	waitFor(t, "the reply to be held", func() bool { return p.Stats().Held == 10 })
	if st := p.Stats(); st.Downstream != 0 || st.Queued != 10 {
		t.Fatalf("stats during the hold %+v", st)
	}
	if held := p.Deliver(); held != 10 {
		t.Fatalf("Deliver = %d, want 10", held)
	}
	expect(t, c, "late reply")
}

// A hold that no traffic crossed says so.
func TestHoldNothing(t *testing.T) {
	t.Parallel()
	srv := newServer(t, true)
	p := start(t, srv.Addr())
	c := dial(t, p.Addr())
	p.Set(Hold, 0)
	if held := p.Deliver(); held != 0 {
		t.Fatalf("Deliver = %d for an idle hold, want 0", held)
	}
	if held := p.Deliver(); held != 0 {
		t.Fatalf("Deliver outside a hold = %d, want 0", held)
	}
	write(t, c, "ping")
	expect(t, c, "ping")
}

// A client that connects during a hold is accepted and its bytes are held:
// the target sees neither the connection nor the bytes until Deliver.
func TestHoldNewConnection(t *testing.T) {
	t.Parallel()
	srv := newServer(t, true)
	p := start(t, srv.Addr())
	p.Set(Hold, 0)
	c := dial(t, p.Addr())
	write(t, c, "hello")
	waitFor(t, "the bytes to be held", func() bool { return p.Stats().Held == 5 })
	if n := srv.accepted.Load(); n != 0 {
		t.Fatalf("the server accepted %d connections during the hold", n)
	}
	if held := p.Deliver(); held != 5 {
		t.Fatalf("Deliver = %d, want 5", held)
	}
	expect(t, c, "hello")
}

// A half-close sent during a hold arrives after the held bytes, not before.
func TestHoldKeepsHalfCloseInOrder(t *testing.T) {
	t.Parallel()
	srv := newServer(t, true)
	p := start(t, srv.Addr())
	c := dial(t, p.Addr())
	write(t, c, "x")
	expect(t, c, "x")
	p.Set(Hold, 0)
	write(t, c, "last words")
	c.CloseWrite()
	waitFor(t, "the bytes to be held", func() bool { return p.Stats().Held == 10 })
	p.Deliver()
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "last words" {
		t.Fatalf("after Deliver read %q, %v; want the held bytes then EOF", got, err)
	}
}

// Bytes queued when a hold begins (behind a delay) are held and counted.
func TestHoldCountsQueuedBytes(t *testing.T) {
	t.Parallel()
	srv := newServer(t, true)
	p := start(t, srv.Addr())
	c := dial(t, p.Addr())
	p.Set(Delay, time.Hour)
	write(t, c, "slow")
	waitFor(t, "the bytes to be queued", func() bool { return p.Stats().Queued == 4 })
	p.Set(Hold, 0)
	if held := p.Deliver(); held != 4 {
		t.Fatalf("Deliver = %d, want the 4 bytes queued when the hold began", held)
	}
	expect(t, c, "slow")
}

// A hold cannot eat memory without bound: past a limit the proxy stops
// reading and TCP flow control stalls the sender, and every byte still
// arrives, in order.
func TestHoldBoundsMemory(t *testing.T) {
	t.Parallel()
	srv := newServer(t, true)
	p := start(t, srv.Addr())
	c := dial(t, p.Addr())
	p.Set(Hold, 0)

	data := make([]byte, 4*maxQueue)
	for i := range data {
		data[i] = byte(i * 7 / 3)
	}
	wrote := make(chan error, 1)
	go func() {
		_, err := c.Write(data)
		wrote <- err
	}()
	waitFor(t, "the queue to fill", func() bool { return p.Stats().Queued >= maxQueue })
	if q := p.Stats().Queued; q > maxQueue+readSize {
		t.Fatalf("queued %d bytes, more than the limit %d", q, maxQueue+readSize)
	}
	p.Deliver()
	got := make([]byte, len(data))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("the bytes arrived changed or out of order")
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
}

func TestBlackhole(t *testing.T) {
	t.Parallel()
	srv := newServer(t, true)
	p := start(t, srv.Addr())
	c := dial(t, p.Addr())
	write(t, c, "ping")
	expect(t, c, "ping")

	p.Set(Blackhole, 0)
	write(t, c, "lost")
	waitFor(t, "the bytes to be dropped", func() bool { return p.Stats().Dropped == 4 })
	p.Set(Pass, 0)
	// The connection stayed open; what was sent in the blackhole is gone.
	write(t, c, "kept")
	expect(t, c, "kept")
	if got := srv.received.Load(); got != 8 {
		t.Fatalf("the server received %d bytes, want 8", got)
	}
}

// A blackhole that follows a hold drops the held bytes.
func TestBlackholeDropsHeldBytes(t *testing.T) {
	t.Parallel()
	srv := newServer(t, true)
	p := start(t, srv.Addr())
	c := dial(t, p.Addr())
	p.Set(Hold, 0)
	write(t, c, "held")
	waitFor(t, "the bytes to be held", func() bool { return p.Stats().Held == 4 })
	p.Set(Blackhole, 0)
	waitFor(t, "the held bytes to be dropped", func() bool { return p.Stats().Dropped == 4 })
	p.Set(Pass, 0)
	write(t, c, "next")
	expect(t, c, "next")
}

func TestDelay(t *testing.T) {
	t.Parallel()
	srv := newServer(t, true)
	p := start(t, srv.Addr())
	c := dial(t, p.Addr())

	// A delay longer than the test: bytes wait in the proxy.
	p.Set(Delay, time.Hour)
	write(t, c, "waiting")
	waitFor(t, "the bytes to be queued", func() bool { return p.Stats().Queued == 7 })
	if st := p.Stats(); st.Upstream != 0 || srv.received.Load() != 0 {
		t.Fatalf("bytes forwarded before their delay: %+v", st)
	}
	// A shorter delay lets them go; each direction adds it. Only the lower
	// bound is checked: the proxy never delivers early, however busy the
	// machine.
	const d = 50 * time.Millisecond
	p.Set(Delay, d)
	expect(t, c, "waiting")
	begin := time.Now()
	write(t, c, "ping")
	expect(t, c, "ping")
	if took := time.Since(begin); took < 2*d {
		t.Fatalf("a round trip took %v under a %v delay each way", took, d)
	}
}

// ResetConns resets both sides of the live connections (each peer sees
// ECONNRESET) and leaves the proxy passing new ones.
func TestResetConns(t *testing.T) {
	t.Parallel()
	srv := newServer(t, false)
	p := start(t, srv.Addr())
	c := dial(t, p.Addr())
	write(t, c, "ping")
	s := srv.Next(t)
	expect(t, s, "ping")
	if n := p.ResetConns(); n != 1 {
		t.Fatalf("ResetConns = %d, want 1", n)
	}
	expectReset(t, c)
	expectReset(t, s)

	c = dial(t, p.Addr())
	write(t, c, "again")
	expect(t, srv.Next(t), "again")
	if st := p.Stats(); st.Resets != 1 || st.Faults != 1 || st.Live != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// Reset resets the live connections and every new one until healed; the
// bytes held at the time are dropped.
func TestReset(t *testing.T) {
	t.Parallel()
	srv := newServer(t, true)
	p := start(t, srv.Addr())
	c := dial(t, p.Addr())
	p.Set(Hold, 0)
	write(t, c, "held")
	waitFor(t, "the bytes to be held", func() bool { return p.Stats().Held == 4 })

	p.Set(Reset, 0)
	expectReset(t, c)
	if st := p.Stats(); st.Dropped != 4 || st.Queued != 0 || st.Live != 0 {
		t.Fatalf("stats after the reset %+v", st)
	}
	if err := expectResetDial(p.Addr()); err != nil {
		t.Fatalf("a new connection during the reset: %v", err)
	}

	p.Set(Pass, 0)
	c = dial(t, p.Addr())
	write(t, c, "healed")
	expect(t, c, "healed")
	if st := p.Stats(); st.Accepted != 3 || st.Resets != 2 {
		t.Fatalf("stats %+v", st)
	}
}

// A server that resets its connection has the proxy reset the client's.
func TestServerResetReachesClient(t *testing.T) {
	t.Parallel()
	srv := newServer(t, false)
	p := start(t, srv.Addr())
	c := dial(t, p.Addr())
	write(t, c, "hello")
	s := srv.Next(t)
	expect(t, s, "hello")
	s.(*net.TCPConn).SetLinger(0)
	s.Close()
	expectReset(t, c)
}

// A target that refuses the connection has the proxy reset the client's.
func TestDialFailureResetsClient(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := ln.Addr().String()
	ln.Close()
	p := start(t, refused)
	if err := expectResetDial(p.Addr()); err != nil {
		t.Fatal(err)
	}
}

// Close ends every connection, held or waiting for its dial, and waits for
// the proxy's goroutines (TestMain checks none leaks).
func TestClose(t *testing.T) {
	t.Parallel()
	srv := newServer(t, true)
	p, err := Start(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	live := dial(t, p.Addr())
	write(t, live, "ping")
	expect(t, live, "ping")
	p.Set(Hold, 0)
	write(t, live, "held")
	pending := dial(t, p.Addr()) // its dial waits for the gate
	write(t, pending, "held")
	waitFor(t, "both to be held", func() bool { return p.Stats().Held == 8 })

	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []net.Conn{live, pending} {
		if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil {
			t.Fatalf("read after Close = %d, %v; want the connection closed", n, err)
		}
	}
	if st := p.Stats(); st.Live != 0 || st.Queued != 0 || st.Dropped != 8 {
		t.Fatalf("stats after Close %+v", st)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	if c, err := net.Dial("tcp", p.Addr()); err == nil {
		c.Close()
		t.Fatal("the proxy still accepts after Close")
	}
}

func TestInvalid(t *testing.T) {
	t.Parallel()
	for _, target := range []string{"", "no-port", "host:1:2"} {
		if _, err := Start(target); !errors.Is(err, ErrInvalid) {
			t.Errorf("Start(%q) = %v, want ErrInvalid", target, err)
		}
	}
	defer func() {
		if recover() == nil {
			t.Fatal("Set with an unknown mode did not panic")
		}
	}()
	(&Proxy{}).Set(Mode(42), 0)
}

// LoseReply forwards the request and loses its answer: the target reads the
// request and answers, the client's connection is reset instead. Requests
// without the bytes, and other connections, pass; it acts once.
func TestLoseReply(t *testing.T) {
	t.Parallel()
	srv := newServer(t, false)
	p := start(t, srv.Addr())
	other := dial(t, p.Addr())
	otherSrv := srv.Next(t)
	c := dial(t, p.Addr())
	cSrv := srv.Next(t)

	p.LoseReply([]byte("COMMIT"))
	write(t, other, "SELECT")
	expect(t, otherSrv, "SELECT")
	write(t, otherSrv, "rows")
	expect(t, other, "rows")

	write(t, c, "COMMIT")
	expect(t, cSrv, "COMMIT") // the request reached the target
	write(t, cSrv, "done")
	expectReset(t, c)
	if _, err := cSrv.Read(make([]byte, 1)); err == nil {
		t.Fatal("the target's side of the connection is still open")
	}
	st := p.Stats()
	if st.LostReplies != 1 || st.Faults != 1 || st.Resets != 1 || st.Dropped != 4 {
		t.Fatalf("stats %+v, want 1 lost reply, 1 fault, 1 reset, 4 bytes dropped", st)
	}

	// Once only: the next request with the bytes gets its answer.
	write(t, other, "COMMIT")
	expect(t, otherSrv, "COMMIT")
	write(t, otherSrv, "done")
	expect(t, other, "done")
	if n := p.Stats().LostReplies; n != 1 {
		t.Fatalf("%d replies lost, want 1", n)
	}
}

// LoseReply(nil) disarms it.
func TestLoseReplyDisarmed(t *testing.T) {
	t.Parallel()
	srv := newServer(t, true)
	p := start(t, srv.Addr())
	c := dial(t, p.Addr())
	p.LoseReply([]byte("COMMIT"))
	p.LoseReply(nil)
	write(t, c, "COMMIT")
	expect(t, c, "COMMIT")
	if st := p.Stats(); st.LostReplies != 0 || st.Faults != 0 {
		t.Fatalf("stats %+v after a disarmed LoseReply", st)
	}
}
