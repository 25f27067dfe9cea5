package engine

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/internal/faultproxy"
)

// proc is one worker process, seen from the coordinator.
type proc struct {
	client int
	cmd    *exec.Cmd
	cfg    workerConfig      // what it was configured with
	proxy  *faultproxy.Proxy // nil unless the run injects network faults
	// kafka are the proxies of the worker's Kafka brokers, when the run
	// injects network faults into an approach that consumes from Kafka.
	kafka []*faultproxy.Proxy

	inMu  sync.Mutex
	stdin io.WriteCloser

	mu     sync.Mutex
	hist   bytes.Buffer // the worker's history lines, without their prefix
	stats  *workerStats
	ready  bool
	stderr tail

	done    chan struct{} // closed once the process has exited and its output is read
	exitErr error
	// crashed: the crash fault killed it (set by the injector, read once
	// it is over).
	crashed bool
}

// tail keeps the last bytes a worker wrote on stderr, for the report of a
// worker that died.
type tail struct {
	mu  sync.Mutex
	buf []byte
	out io.Writer // also copied here, when set
}

const tailMax = 4 << 10

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > tailMax {
		t.buf = append([]byte(nil), t.buf[len(t.buf)-tailMax:]...)
	}
	if t.out != nil {
		_, _ = t.out.Write(p) // a broken copy must not stop the worker
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.buf))
}

// startProc starts worker client and sends it cfg; its lines go to mon as
// they arrive.
func startProc(exe string, args, env []string, cfg workerConfig, proxy *faultproxy.Proxy, mon *monitor, stderr io.Writer) (*proc, error) {
	p, err := spawnProc(exe, args, env, cfg.Client, mon, stderr)
	if err != nil {
		return nil, err
	}
	if err := p.configure(cfg, proxy, nil); err != nil {
		return nil, err
	}
	return p, nil
}

// spawnProc starts the process of worker client, which waits for its
// configuration (configure); its lines go to mon as they arrive.
func spawnProc(exe string, args, env []string, client int, mon *monitor, stderr io.Writer) (*proc, error) {
	p := &proc{client: client, done: make(chan struct{})}
	p.stderr.out = stderr
	p.cmd = exec.Command(exe, args...)
	p.cmd.Env = append(append(os.Environ(), envWorker+"=1"), env...)
	// Its own process group: a ^C at the terminal reaches the
	// coordinator, which stops its workers itself.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p.cmd.Stderr = &p.stderr
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("engine: starting worker %d: %w", client, err)
	}
	go p.read(stdout, mon)
	return p, nil
}

// configure sends a spawned worker its configuration, which it runs its
// client with, through proxy and kafka (its proxies, when the run injects
// network faults); the worker is killed if it cannot take it.
func (p *proc) configure(cfg workerConfig, proxy *faultproxy.Proxy, kafka []*faultproxy.Proxy) error {
	p.cfg, p.proxy, p.kafka = cfg, proxy, kafka
	b, err := json.Marshal(cfg)
	if err != nil {
		p.kill()
		return err
	}
	if err := p.send(b); err != nil {
		p.kill()
		return fmt.Errorf("engine: configuring worker %d: %w", cfg.Client, err)
	}
	return nil
}

// read demultiplexes the worker's stdout until it ends, then waits for the
// process, and wakes mon's waiters once done is closed: a wait for every
// worker to get ready ends as soon as one has exited instead.
func (p *proc) read(stdout io.Reader, mon *monitor) {
	defer mon.exited()
	defer close(p.done)
	br := bufio.NewReaderSize(stdout, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if err != nil {
			break // a torn last line was being written when the worker died
		}
		line = line[:len(line)-1]
		switch {
		case bytes.HasPrefix(line, []byte(prefixHistory)):
			rec := line[len(prefixHistory):]
			p.mu.Lock()
			p.hist.Write(rec)
			p.hist.WriteByte('\n')
			p.mu.Unlock()
			mon.history(rec)
		case bytes.HasPrefix(line, []byte(prefixEvent)):
			var ev event
			if json.Unmarshal(line[len(prefixEvent):], &ev) != nil {
				continue
			}
			p.mu.Lock()
			switch ev.Ev {
			case evReady:
				p.ready = true
			case evStats:
				p.stats = ev.Stats
			}
			p.mu.Unlock()
			mon.event(p.client, ev)
		}
	}
	p.exitErr = p.cmd.Wait()
}

// send writes one line to the worker's stdin.
func (p *proc) send(line []byte) error {
	p.inMu.Lock()
	defer p.inMu.Unlock()
	_, err := p.stdin.Write(append(line, '\n'))
	return err
}

// command sends c; a worker that is gone cannot take it, which the run
// notices when it waits for the worker.
func (p *proc) command(c command) {
	b, _ := json.Marshal(c) // a command always encodes
	_ = p.send(b)
}

func (p *proc) signal(sig syscall.Signal) error { return p.cmd.Process.Signal(sig) }

// kill resumes and kills the worker; its open operations become unknown.
func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Kill()
}

// exited reports whether the worker has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// history returns the worker's history stream so far.
func (p *proc) history() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]byte(nil), p.hist.Bytes()...)
}

// died describes a worker that exited without its stats, or nil.
func (p *proc) died() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stats != nil && p.exitErr == nil {
		return nil
	}
	why := "exited"
	if p.exitErr != nil {
		why = p.exitErr.Error()
	}
	if msg := p.stderr.String(); msg != "" {
		why += ": " + msg
	}
	return fmt.Errorf("worker %d %s", p.client, why)
}

// stopped reports whether the process is stopped (state T in
// /proc/<pid>/stat): a SIGSTOP took effect.
func (p *proc) stopped() (bool, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return false, err
	}
	// The command name, in parentheses, may hold spaces and parentheses:
	// the state is the first field after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return false, errors.New("engine: unreadable /proc stat")
	}
	f := bytes.Fields(b[i+1:])
	return len(f) > 0 && string(f[0]) == "T", nil
}

// readHistory merges the workers' streams into one history.
func readHistory(ps []*proc) ([]history.Op, error) {
	rs := make([]io.Reader, len(ps))
	for i, p := range ps {
		rs[i] = bytes.NewReader(p.history())
	}
	return history.Read(rs...)
}

// proxies returns the worker's proxies: its database's and its brokers'.
func (p *proc) proxies() []*faultproxy.Proxy {
	if p.proxy == nil {
		return p.kafka
	}
	return append([]*faultproxy.Proxy{p.proxy}, p.kafka...)
}

// cut holds every proxy of the worker (mode Hold), or ends the hold
// (another mode): with deliver, the held bytes go out late and in order,
// without it the connections are reset.
func (p *proc) cut(mode faultproxy.Mode, deliver bool) {
	for _, x := range p.proxies() {
		switch {
		case mode == faultproxy.Hold:
			x.Set(faultproxy.Hold, 0)
		case deliver:
			x.Deliver()
		default:
			x.Set(faultproxy.Reset, 0)
			x.Set(mode, 0)
		}
	}
}

// held counts the bytes the worker's proxies have held so far.
func (p *proc) held() int64 {
	var n int64
	for _, x := range p.proxies() {
		n += x.Stats().Held
	}
	return n
}
