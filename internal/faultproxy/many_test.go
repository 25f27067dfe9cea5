package faultproxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// many is how many connections the concurrent tests open at once.
const many = 100

// each runs f for every connection concurrently and fails the test with the
// errors it returns.
func each(t *testing.T, conns []*net.TCPConn, f func(i int, c *net.TCPConn) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(conns))
	for i, c := range conns {
		wg.Go(func() { errs[i] = f(i, c) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

func dialMany(t *testing.T, addr string, n int) []*net.TCPConn {
	t.Helper()
	conns := make([]*net.TCPConn, n)
	for i := range conns {
		conns[i] = dial(t, addr)
	}
	return conns
}

// stream is what connection i sends: lines that name it, so that bytes
// crossing to another connection, lost or reordered show.
func stream(i, lines int, tag string) string {
	var b strings.Builder
	for j := range lines {
		fmt.Fprintf(&b, "%s conn %03d line %03d\n", tag, i, j)
	}
	return b.String()
}

func roundTrip(c net.Conn, s string) error {
	if _, err := io.WriteString(c, s); err != nil {
		return err
	}
	return readExactly(c, s)
}

func readExactly(c net.Conn, want string) error {
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil {
		return fmt.Errorf("reading %d bytes: %w", len(want), err)
	}
	if string(got) != want {
		return fmt.Errorf("read %.40q…, want %.40q…", got, want)
	}
	return nil
}

func TestManyConnectionsHold(t *testing.T) {
	t.Parallel()
	srv := newServer(t, true)
	p := start(t, srv.Addr())
	conns := dialMany(t, p.Addr(), many)
	each(t, conns, func(i int, c *net.TCPConn) error { return roundTrip(c, stream(i, 1, "before")) })

	p.Set(Hold, 0)
	// Half as many again connect during the hold.
	conns = append(conns, dialMany(t, p.Addr(), many/2)...)
	var total int64
	for i := range conns {
		total += int64(len(stream(i, 20, "held")))
	}
	each(t, conns, func(i int, c *net.TCPConn) error {
		_, err := io.WriteString(c, stream(i, 20, "held"))
		return err
	})
	waitFor(t, "every byte to be held", func() bool { return p.Stats().Held == total })
	if held := p.Deliver(); held != total {
		t.Fatalf("Deliver = %d, want %d", held, total)
	}
	each(t, conns, func(i int, c *net.TCPConn) error { return readExactly(c, stream(i, 20, "held")) })
	if st := p.Stats(); st.Accepted != many+many/2 || st.Live != many+many/2 || st.Dropped != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestManyConnectionsBlackhole(t *testing.T) {
	t.Parallel()
	srv := newServer(t, true)
	p := start(t, srv.Addr())
	conns := dialMany(t, p.Addr(), many)
	each(t, conns, func(i int, c *net.TCPConn) error { return roundTrip(c, stream(i, 1, "before")) })

	p.Set(Blackhole, 0)
	var total int64
	each(t, conns, func(i int, c *net.TCPConn) error {
		_, err := io.WriteString(c, stream(i, 5, "lost"))
		return err
	})
	for i := range conns {
		total += int64(len(stream(i, 5, "lost")))
	}
	waitFor(t, "every byte to be dropped", func() bool { return p.Stats().Dropped == total })
	p.Set(Pass, 0)
	each(t, conns, func(i int, c *net.TCPConn) error { return roundTrip(c, stream(i, 5, "kept")) })
}

func TestManyConnectionsDelay(t *testing.T) {
	t.Parallel()
	srv := newServer(t, true)
	p := start(t, srv.Addr())
	conns := dialMany(t, p.Addr(), many)
	p.Set(Delay, 20*time.Millisecond)
	each(t, conns, func(i int, c *net.TCPConn) error {
		for j := range 5 {
			if err := roundTrip(c, stream(i, j+1, "delayed")); err != nil {
				return err
			}
		}
		return nil
	})
}

func TestManyConnectionsReset(t *testing.T) {
	t.Parallel()
	srv := newServer(t, true)
	p := start(t, srv.Addr())
	conns := dialMany(t, p.Addr(), many)
	each(t, conns, func(i int, c *net.TCPConn) error { return roundTrip(c, stream(i, 1, "before")) })

	p.Set(Reset, 0)
	isReset := func(_ int, c *net.TCPConn) error {
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
			return fmt.Errorf("read after a reset: %v, want ECONNRESET", err)
		}
		return nil
	}
	each(t, conns, isReset)
	each(t, make([]*net.TCPConn, many), func(int, *net.TCPConn) error { return expectResetDial(p.Addr()) })
	p.Set(Pass, 0)
	each(t, dialMany(t, p.Addr(), many), func(i int, c *net.TCPConn) error { return roundTrip(c, stream(i, 3, "after")) })
	if st := p.Stats(); st.Resets != 2*many || st.Live != many {
		t.Fatalf("stats %+v", st)
	}
}
