package replpair

import (
	"context"
	"fmt"
)

// Primary returns the node that accepts writes (after a promotion, the
// promoted one; an isolated old primary does too, but is no longer this).
func (p *Pair) Primary() Node { return p.primary }

// Standby returns the node that is not Primary.
func (p *Pair) Standby() Node { return p.primary.Other() }

// Port returns the port node n listens on, on 127.0.0.1.
func (p *Pair) Port(n Node) int { return p.ports[n] }

// URL connects to node n alone, as the superuser postgres with its
// password, to the database lockfree; query ("search_path=s") is added when
// not empty.
func (p *Pair) URL(n Node, query string) string {
	return fmt.Sprintf("postgres://postgres:%s@127.0.0.1:%d/lockfree?sslmode=disable&connect_timeout=10%s",
		p.password, p.ports[n], and(query))
}

// MultiURL lists both nodes with target_session_attrs=read-write, as an
// application configured for failover would: pgx connects to the first one
// that accepts writes, in list order (node1 first).
func (p *Pair) MultiURL(query string) string {
	return fmt.Sprintf("postgres://postgres:%s@127.0.0.1:%d,127.0.0.1:%d/lockfree?sslmode=disable"+
		"&target_session_attrs=read-write&connect_timeout=10%s", p.password, p.ports[1], p.ports[2], and(query))
}

func and(query string) string {
	if query == "" {
		return ""
	}
	return "&" + query
}

// Writable reports whether the primary takes writes as far as the steps
// taken know: up, not isolated, not waiting for a held synchronous standby.
func (p *Pair) Writable() bool {
	return !p.down[p.primary] && !p.isolated[p.primary] && !(p.sync && p.held)
}

// HoldStandby stops the standby's WAL receiver: from now on the primary's
// commits do not reach it (and, with SetSync(true), they wait for it).
func (p *Pair) HoldStandby(ctx context.Context) error {
	if err := p.run(ctx, nil, "receiver-stop", p.Standby().arg()); err != nil {
		return err
	}
	p.held = true
	return nil
}

// ReleaseStandby starts the standby's WAL receiver again and returns once
// it streams.
func (p *Pair) ReleaseStandby(ctx context.Context) error {
	if err := p.run(ctx, nil, "receiver-start", p.Standby().arg()); err != nil {
		return err
	}
	p.held = false
	return nil
}

// Kill crashes node n: SIGKILL to its postmaster, no shutdown checkpoint,
// its open sessions gone. Whatever it had not sent to the standby is lost.
func (p *Pair) Kill(ctx context.Context, n Node) error {
	p.down[n] = true // even half done, Restore starts it again
	return p.run(ctx, nil, "kill", n.arg())
}

// Stop shuts node n down cleanly (fast mode).
func (p *Pair) Stop(ctx context.Context, n Node) error {
	p.down[n] = true
	return p.run(ctx, nil, "stop", n.arg())
}

// StartNode starts node n again, in the role its data gives it.
func (p *Pair) StartNode(ctx context.Context, n Node) error {
	if err := p.run(ctx, nil, "start", n.arg()); err != nil {
		return err
	}
	p.down[n] = false
	return nil
}

// Isolate cuts node n off as a network partition would: new connections
// and replication are refused, sessions already open keep working (clients
// on its side of the partition).
func (p *Pair) Isolate(ctx context.Context, n Node) error {
	p.isolated[n] = true
	return p.run(ctx, nil, "isolate", n.arg())
}

// Heal undoes Isolate.
func (p *Pair) Heal(ctx context.Context, n Node) error {
	if err := p.run(ctx, nil, "heal", n.arg()); err != nil {
		return err
	}
	p.isolated[n] = false
	return nil
}

// Promote promotes the standby and returns once it accepts writes; it
// becomes Primary. The old primary is left as it is: kill or isolate it
// first, or have a split brain.
func (p *Pair) Promote(ctx context.Context) error {
	n := p.Standby()
	if err := p.run(ctx, nil, "promote", n.arg()); err != nil {
		return err
	}
	p.primary = n
	p.promoted = true
	return nil
}

// SetSync makes replication synchronous (the primary's commits wait until
// the standby has flushed them) or asynchronous again.
func (p *Pair) SetSync(ctx context.Context, on bool) error {
	mode := "async"
	if on {
		mode = "sync"
	}
	p.sync = on // a half-done switch is undone by Restore
	return p.run(ctx, nil, "mode", mode)
}
