package engine

// Delay is Isolate that heals: the held bytes are delivered late, in order,
// after another worker took the key over (or was kept out of it) — the
// delayed packet (fault_isolate.go's cut, delivered instead of reset).
const Delay Fault = "delay"

type delay struct{}

func (delay) Name() Fault { return Delay }
func (delay) How() string {
	return "cuts of one worker's connections at a before-write point, held past the lease until another worker sent to the key had taken it over or been kept out of it, then delivered late (the write lands after that)"
}
func (delay) networked()            {}
func (delay) bites()                {}
func (delay) start(r *run) injector { return cutRun{r: r, f: Delay, deliver: true} }
