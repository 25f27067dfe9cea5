package engine

// Delay is Isolate that heals: the held bytes are delivered late, in order,
// after another worker took the key over (or was kept out of it) — the
// delayed packet (fault_isolate.go's cut, delivered instead of reset).
const Delay Fault = "delay"

type delay struct{}

func (delay) Name() Fault { return Delay }
func (delay) How() string {
	return "cuts of one worker's connections at a before-write point, held past the lease and a worker sent to the key, then delivered late: the write lands after"
}
func (delay) counts() string {
	return "the proxy held bytes and a worker sent to the key took it over or was kept out of it"
}
func (delay) networked()            {}
func (delay) bites()                {}
func (delay) pointArmed()           {}
func (delay) start(r *run) injector { return &cutRun{r: r, f: Delay, deliver: true} }
