package engine

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/report"
	"github.com/lockfree-go/lockfree/internal/faultproxy"
	"github.com/lockfree-go/lockfree/internal/pgaddr"
)

// fleet is the worker processes of one approach's run. It is safe for
// concurrent use: the crash fault adds a worker while other faults go
// through the fleet.
type fleet struct {
	cfg Config
	mon *monitor

	mu    sync.Mutex
	procs []*proc
	// idle: the worker the injector is after completed no operation
	// lately (victim).
	idle atomic.Bool
}

// all returns the workers so far.
func (f *fleet) all() []*proc {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*proc(nil), f.procs...)
}

// others returns the workers so far but v.
func (f *fleet) others(v *proc) []*proc {
	out := f.all()
	return slices.DeleteFunc(out, func(p *proc) bool { return p == v })
}

// add adds a worker started during the run (a crashed one's replacement).
func (f *fleet) add(p *proc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.procs = append(f.procs, p)
}

// of is the worker of client.
func (f *fleet) of(client int) *proc {
	for _, p := range f.all() {
		if p.client == client {
			return p
		}
	}
	panic(fmt.Sprintf("engine: no worker of client %d", client))
}

// testExecutable, when set, is the binary the workers of a Config without
// an Executable run instead of this process's: this package's tests set it
// (export_test.go) to the lab built without the race detector, so that
// their race-checked test binary coordinates and the workers run at speed.
var testExecutable string

// executable is the binary the workers run.
func (f *fleet) executable() (string, error) {
	if f.cfg.Executable != "" {
		return f.cfg.Executable, nil
	}
	if testExecutable != "" {
		return testExecutable, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("engine: finding the worker binary: %w", err)
	}
	return exe, nil
}

// startWorker starts the worker wc configures, through a proxy of its own
// of the database when network, and of each of brokers.
func (f *fleet) startWorker(wc workerConfig, network bool, brokers []string) error {
	exe, err := f.executable()
	if err != nil {
		return err
	}
	var proxy *faultproxy.Proxy
	if network {
		if proxy, wc.DB, err = proxied(wc.DB); err != nil {
			return err
		}
	}
	kafkaProxies, routes, err := proxyBrokers(brokers)
	if err != nil {
		if proxy != nil {
			proxy.Close()
		}
		return err
	}
	wc.KafkaRoutes = routes
	p, err := startProc(exe, f.cfg.Args, f.cfg.Env, wc, proxy, f.mon, f.cfg.Stderr)
	if err != nil {
		for _, k := range append(kafkaProxies, proxy) {
			if k != nil {
				k.Close()
			}
		}
		return err
	}
	p.kafka = kafkaProxies
	f.add(p)
	return nil
}

// spawn spawns a worker process for lane, which waits for its
// configuration.
func (f *fleet) spawn(lane int) (*proc, error) {
	exe, err := f.executable()
	if err != nil {
		return nil, err
	}
	return spawnProc(exe, f.cfg.Args, f.cfg.Env, lane, f.mon, f.cfg.Stderr)
}

// ready waits until every worker has warmed up, within bound; a worker
// that cannot get ready within StartBound says why itself, and bound is for
// one that hangs.
func (f *fleet) ready(ctx context.Context, bound time.Duration) error {
	procs := f.all()
	ready := f.mon.wait(ctx, bound, func() bool {
		for _, p := range procs {
			p.mu.Lock()
			ok := p.ready
			p.mu.Unlock()
			if !ok && !p.exited() {
				return false
			}
		}
		return true
	})
	for _, p := range procs {
		if p.exited() {
			<-p.done
			err := p.died()
			if strings.Contains(err.Error(), workerErrPrefix) {
				// It ran as a worker, and said why it stopped.
				return fmt.Errorf("engine: a worker did not get ready: %w", err)
			}
			return fmt.Errorf("%w: %w", errNoWorker, err)
		}
	}
	if !ready {
		return fmt.Errorf("engine: the workers were not ready within %v", bound)
	}
	return nil
}

// halt lets go whatever a fault left stopped or held, so that every
// operation ends, halts the workers, and waits for them to exit within
// bound, then kills the rest; deaths go to log as notes.
func (f *fleet) halt(ctx context.Context, bound time.Duration, log *runLog) error {
	procs := f.all()
	for _, p := range procs {
		_ = p.signal(sigCont)
		p.cut(faultproxy.Pass, true)
		p.command(command{Cmd: cmdClear})
		p.command(command{Cmd: cmdHalt})
	}
	leaving, stopLeaving := context.WithCancel(ctx)
	defer stopLeaving()
	go f.letLeave(leaving)
	deadline := time.NewTimer(bound)
	defer deadline.Stop()
	for _, p := range procs {
		select {
		case <-p.done:
		case <-deadline.C:
			log.note("workers still running %v after the halt were killed; their open operations count as unknown", bound)
			f.cleanup()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for _, p := range procs {
		if p.crashed {
			continue // the crash fault's, counted
		}
		if err := p.died(); err != nil {
			log.note("%v; its open operations count as unknown", err)
		}
	}
	return nil
}

// cleanup kills the workers that are still running and closes the proxies.
// letLeave sends every worker cmdLeave once each has reported its stats —
// a Drainer has drained — or exited, or once ctx ends: no member of a
// consumer group leaves it, making the others rebalance, while another
// still applies what was sent to it.
func (f *fleet) letLeave(ctx context.Context) {
	procs := f.all()
	f.mon.wait(ctx, maxBlock, func() bool {
		for _, p := range procs {
			p.mu.Lock()
			drained := p.stats != nil
			p.mu.Unlock()
			if !drained && !p.exited() {
				return false
			}
		}
		return true
	})
	for _, p := range procs {
		p.command(command{Cmd: cmdLeave})
	}
}

func (f *fleet) cleanup() {
	for _, p := range f.all() {
		if !p.exited() {
			p.kill()
			<-p.done
		}
		for _, x := range p.proxies() {
			x.Close()
		}
	}
}

// victim picks the next worker to inject a fault into, round-robin from *i
// over the workers that are running and completed an operation in the last
// second — a worker with nothing to do (its partitions are another's)
// would never reach a before-write point — or over every running worker
// when none did.
func (f *fleet) victim(i *int, mon *monitor) (*proc, bool) {
	procs := f.all()
	since := history.Now() - history.Time(time.Second)
	var fallback *proc
	for range procs {
		p := procs[*i%len(procs)]
		*i++
		if p.exited() {
			continue
		}
		if mon.active(p.client, since) {
			return p, true
		}
		if fallback == nil {
			fallback = p
		}
	}
	return fallback, false
}

// history merges the workers' streams into one history.
func (f *fleet) history() ([]history.Op, error) { return readHistory(f.all()) }

// stats sums the workers' figures over the measured part of the run.
func (f *fleet) stats() workerStats {
	var sum workerStats
	for _, p := range f.all() {
		p.mu.Lock()
		if s := p.stats; s != nil {
			sum.add(s)
		}
		p.mu.Unlock()
	}
	return sum
}

// metrics merges the metrics the workers reported with their stats; nil
// when the run collected none.
func (f *fleet) metrics() []report.Metric {
	var all []report.Metric
	for _, p := range f.all() {
		p.mu.Lock()
		if s := p.stats; s != nil {
			all = report.MergeMetrics(all, s.Metrics)
		}
		p.mu.Unlock()
	}
	return all
}

// proxied starts a proxy in front of url's server and returns it with url
// pointing at it.
func proxied(url string) (*faultproxy.Proxy, string, error) {
	target, err := pgaddr.HostPort(url)
	if err != nil {
		return nil, "", fmt.Errorf("engine: network faults: %w", err)
	}
	p, err := faultproxy.Start(target)
	if err != nil {
		return nil, "", err
	}
	u, err := pgaddr.WithHostPort(url, p.Addr())
	if err != nil {
		p.Close()
		return nil, "", err
	}
	return p, u, nil
}

// proxyBrokers starts a proxy in front of each of brokers and returns them
// with the routes from each broker's address to its proxy's.
func proxyBrokers(brokers []string) ([]*faultproxy.Proxy, map[string]string, error) {
	if len(brokers) == 0 {
		return nil, nil, nil
	}
	var ps []*faultproxy.Proxy
	routes := map[string]string{}
	for _, b := range brokers {
		p, err := faultproxy.Start(b)
		if err != nil {
			for _, q := range ps {
				q.Close()
			}
			return nil, nil, err
		}
		ps = append(ps, p)
		routes[b] = p.Addr()
	}
	return ps, routes, nil
}
