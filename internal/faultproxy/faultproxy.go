// Package faultproxy is a TCP proxy that injects network faults between a
// client and a server (PostgreSQL, Kafka): it can pass traffic, delay it,
// blackhole it (bytes are accepted and never delivered, like a silent
// partition), or reset every connection. Tests and `lockfree compare` put it
// in front of a real server to partition clients from it.
package faultproxy

import (
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"time"
)

// Mode is what the proxy does to traffic.
type Mode int

const (
	// Pass forwards traffic.
	Pass Mode = iota
	// Delay forwards traffic after a fixed delay per chunk.
	Delay
	// Blackhole accepts connections and bytes and delivers nothing.
	Blackhole
	// Reset resets existing connections and every new one.
	Reset
)

// Proxy forwards connections from Addr to a target. Its methods are safe for
// concurrent use.
type Proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	mode  Mode
	delay time.Duration
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// Start listens on a free loopback port and forwards to target (host:port).
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Set switches the proxy's mode; delay matters only for Delay. Switching to
// Reset resets every open connection at once.
func (p *Proxy) Set(mode Mode, delay time.Duration) {
	p.mu.Lock()
	p.mode, p.delay = mode, delay
	var reset []net.Conn
	if mode == Reset {
		for c := range p.conns {
			reset = append(reset, c)
		}
	}
	p.mu.Unlock()
	for _, c := range reset {
		resetConn(c)
	}
}

// Mode returns the current mode.
func (p *Proxy) Mode() Mode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode
}

// Close stops listening, closes every connection and waits for the
// forwarding goroutines.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0) // close with RST
	}
	c.Close()
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mode == Reset {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(client) {
			resetConn(client)
			continue
		}
		p.wg.Add(1)
		go p.serve(client)
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	defer p.untrack(client)
	defer client.Close()
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		return
	}
	if !p.track(server) {
		resetConn(server)
		return
	}
	defer p.untrack(server)
	defer server.Close()
	done := make(chan struct{}, 2)
	go func() { p.pipe(server, client); done <- struct{}{} }()
	go func() { p.pipe(client, server); done <- struct{}{} }()
	<-done
	// One side ended: end the other, with a reset if we are resetting.
	if p.Mode() == Reset {
		resetConn(client)
		resetConn(server)
	}
	client.Close()
	server.Close()
	<-done
}

func (p *Proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			mode, delay := p.mode, p.delay
			p.mu.Unlock()
			switch mode {
			case Blackhole:
				// Swallowed.
			case Reset:
				return
			default:
				if mode == Delay && delay > 0 {
					time.Sleep(delay)
				}
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return
			}
			if tc, ok := dst.(*net.TCPConn); ok {
				tc.CloseWrite()
			}
			return
		}
	}
}

// RewriteURL returns the database URL u pointing at addr (host:port) instead
// of its own host and port.
func RewriteURL(u, addr string) (string, error) {
	parsed, err := url.Parse(u)
	if err != nil {
		return "", err
	}
	parsed.Host = addr
	return parsed.String(), nil
}
