package history

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
)

// Overlap: two tenures of one lock (or ownerships of one partition) held at
// once, each certainly in force by the service's own rules — the lock's
// exclusivity broken, whether or not a fence hid it from the data.
const Overlap Anomaly = "overlapping tenures"

// Revived: a lease renewed after it had certainly expired, so that its
// holder went on as if it had held it all along.
const Revived Anomaly = "revived lease"

// Tenure is one grant of a lease — a lock, or a partition's ownership — as
// its holder saw it, on the history clock: the span over which the grant
// was certainly in force by the lease service's own rules, whatever the
// holder did meanwhile. Certainly means: From is when the grant returned to
// the holder (the service granted it before), To is the send time of the
// successful release that ended it (the service released it after), or else
// the send time of the last successful grant or renewal plus the lease's
// TTL (the service measured the TTL from a later moment) less a margin for
// the two clocks. A span with To ≤ From says nothing.
type Tenure struct {
	// Name is the lock's or the partition's name.
	Name string
	// Client is the holder's client in the history; Token tells its
	// grants apart (a fencing token, an epoch).
	Client int
	Token  int64
	From   Time
	To     Time
	// Sent is when the grant's request was sent; zero when not known, and
	// then Ascending does not judge the grant.
	Sent Time
}

// Renewal is a successful renewal of a tenure, for Revivals: Sent is when
// it was sent, Arrived the earliest it can have reached the service (later
// than Sent when a fault held the request; zero for Sent), Expiry the
// latest moment the lease could have expired before it — the return of the
// previous grant or renewal plus the TTL.
type Renewal struct {
	Name    string
	Client  int
	Token   int64
	Sent    Time
	Arrived Time
	Expiry  Time
}

// Exclusive returns a violation for each pair of tenures of one name, by
// different grants, whose certain spans intersect: at that moment the
// service had granted the name to both. base is the time violation texts
// count their seconds from.
func Exclusive(ts []Tenure, base Time) []Violation {
	ts = slices.DeleteFunc(slices.Clone(ts), func(t Tenure) bool { return t.To <= t.From })
	slices.SortFunc(ts, func(a, b Tenure) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.From, b.From))
	})
	d := &describer{base: base}
	var out []Violation
	for i := range ts {
		a := &ts[i]
		for j := i + 1; j < len(ts) && ts[j].Name == a.Name && ts[j].From < a.To; j++ {
			b := &ts[j]
			if a.Client == b.Client && a.Token == b.Token {
				continue
			}
			out = append(out, Violation{Key: a.Name, Anomaly: Overlap, Text: fmt.Sprintf(
				"client %d was granted %s with %s at %s while client %d's grant with %s (from %s) was in force until at least %s",
				b.Client, quote(a.Name), tokenText(b.Token), d.at(b.From), a.Client, tokenText(a.Token), d.at(a.From), d.at(a.To))})
		}
	}
	return out
}

// Revivals returns a violation for each renewal that reached the service
// after its lease had certainly expired: a lease service renews only a
// lease still in force.
func Revivals(rs []Renewal, base Time) []Violation {
	d := &describer{base: base}
	var out []Violation
	for _, r := range rs {
		at, held := r.Sent, ""
		if r.Arrived > r.Sent {
			at, held = r.Arrived, " (held by a fault until "+d.at(r.Arrived)+")"
		}
		if at > r.Expiry {
			out = append(out, Violation{Key: r.Name, Anomaly: Revived, Text: fmt.Sprintf(
				"client %d's lease on %s with %s was renewed by a request sent at %s%s, after it had expired (at %s at the latest)",
				r.Client, quote(r.Name), tokenText(r.Token), d.at(r.Sent), held, d.at(r.Expiry))})
		}
	}
	return out
}

// Regressed: a grant whose token (an epoch, an incarnation) is not above
// that of a grant of the same name that had returned before it was
// requested — the service minted it later, and its tokens only grow.
const Regressed Anomaly = "token went back"

// Ascending returns a violation for each grant whose request was sent after
// another grant of the same name had returned (its From) and whose token is
// not above that grant's: whatever happened between — a release, an expiry,
// a purge, a restart, a failover — the later grant was minted later. A
// grant with no Sent or no token (≤ 0) is not judged; one grant reported
// twice (same client and token) is not two.
func Ascending(ts []Tenure, base Time) []Violation {
	ts = slices.DeleteFunc(slices.Clone(ts), func(t Tenure) bool { return t.Token <= 0 })
	byFrom := slices.Clone(ts)
	slices.SortFunc(byFrom, func(a, b Tenure) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.From, b.From))
	})
	bySent := slices.DeleteFunc(ts, func(t Tenure) bool { return t.Sent == 0 })
	slices.SortFunc(bySent, func(a, b Tenure) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Sent, b.Sent))
	})
	d := &describer{base: base}
	var out []Violation
	var top *Tenure // the highest token of b's name among the grants returned before b was sent
	i := 0
	for j, b := range bySent {
		if j > 0 && b.Name == bySent[j-1].Name && b.Client == bySent[j-1].Client && b.Token == bySent[j-1].Token && b.Sent == bySent[j-1].Sent {
			continue // one grant, reported twice
		}
		for ; i < len(byFrom) && (byFrom[i].Name < b.Name || byFrom[i].Name == b.Name && byFrom[i].From < b.Sent); i++ {
			if a := &byFrom[i]; top == nil || top.Name != a.Name || a.Token > top.Token {
				top = a
			}
		}
		if top == nil || top.Name != b.Name || b.Token > top.Token || b.Token == top.Token && b.Client == top.Client {
			continue
		}
		out = append(out, Violation{Key: b.Name, Anomaly: Regressed, Text: fmt.Sprintf(
			"client %d was granted %s with %s by a request sent at %s, after client %d's grant with %s had returned (at %s)",
			b.Client, quote(b.Name), tokenText(b.Token), d.at(b.Sent), top.Client, tokenText(top.Token), d.at(top.From))})
	}
	return out
}

func tokenText(t int64) string { return "token " + strconv.FormatInt(t, 10) }

// Lapsed: a call run as a tenure's holder (a partition's owner) well after
// the tenure had certainly ended.
const Lapsed Anomaly = "call after its tenure lapsed"

// Act is a call its client began as the holder of the tenure (Name,
// Client, Token), at At.
type Act struct {
	Name   string
	Client int
	Token  int64
	At     Time
	// Excused: something outside the holder held it back between its
	// check of the lease and the call (a fault injected there): it is not
	// judged.
	Excused bool
}

// Lapses returns a violation for each act that began more than slack after
// the end of its tenure (the latest To of the tenures (Name, Client,
// Token)); an act whose tenure is not among ts is not judged. A holder
// checks that its lease is still safe before each call, so slack only
// covers the instants between that check and the call.
func Lapses(ts []Tenure, acts []Act, slack, base Time) []Violation {
	latest := latestTenures(ts)
	d := &describer{base: base}
	var out []Violation
	for _, a := range acts {
		t, ok := latest[tenureKey{a.Name, a.Client, a.Token}]
		to := t.To
		if ok && !a.Excused && a.At > to+slack {
			out = append(out, Violation{Key: a.Name, Anomaly: Lapsed, Text: fmt.Sprintf(
				"client %d began a call as the holder of %s with %s at %s, while its tenure had ended by %s",
				a.Client, quote(a.Name), tokenText(a.Token), d.at(a.At), d.at(to))})
		}
	}
	return out
}

// RefusedOwner: a write refused for a stale tenure (a partition's epoch no
// longer current) while that tenure was certainly in force — the store took
// the ownership away from a holder that still had it by the store's own
// rules.
const RefusedOwner Anomaly = "write refused while its owner held"

// Refused returns a violation for each refusal (an Act whose At is when the
// store's refusal, and the read that showed the tenure stale, had returned)
// that came back before the end of its tenure (the latest To of the tenures
// (Name, Client, Token)): the write and the read were sent after the grant
// returned, and answered while the grant was certainly in force, so the
// store refused a current holder. A refusal whose tenure is not among ts is
// not judged.
func Refused(ts []Tenure, refusals []Act, base Time) []Violation {
	latest := latestTenures(ts)
	d := &describer{base: base}
	var out []Violation
	for _, a := range refusals {
		t, ok := latest[tenureKey{a.Name, a.Client, a.Token}]
		if ok && a.At < t.To {
			out = append(out, Violation{Key: a.Name, Anomaly: RefusedOwner, Text: fmt.Sprintf(
				"client %d's write as the holder of %s with %s was refused as stale by %s, while its tenure (from %s) was in force until at least %s",
				a.Client, quote(a.Name), tokenText(a.Token), d.at(a.At), d.at(t.From), d.at(t.To))})
		}
	}
	return out
}

// StaleRelease: a tenure released by the service after it had granted the
// name to a later tenure — the release freed another holder's grant.
const StaleRelease Anomaly = "release of a superseded tenure"

// StaleReleases returns a violation for each release (an Act whose At is
// when the request that the service answered with a release was sent) of a
// tenure (Name, Client, Token) that a tenure of the same name with a higher
// token had been granted before (its From, when its grant returned, before
// At): a service releases only the tenure a request names, and that one was
// no longer current when the request was sent — tokens only grow.
func StaleReleases(ts []Tenure, releases []Act, base Time) []Violation {
	return staleActs(ts, releases, base, StaleRelease, "release", "freed it")
}

// StaleValue: a lease's value set by the service for a tenure after it had
// granted the name to a later tenure — the value of another holder's lease.
const StaleValue Anomaly = "value set by a superseded tenure"

// StaleValues is StaleReleases for the values the service set (SetValue
// answered as done, At when its request was sent): a service sets only the
// value of the tenure a request names, and only while it is current.
func StaleValues(ts []Tenure, sets []Act, base Time) []Violation {
	return staleActs(ts, sets, base, StaleValue, "value set", "changed it")
}

// staleActs returns a violation (anomaly) for each of acts sent after a
// later tenure of its name had been granted: what it was, what it did.
func staleActs(ts []Tenure, acts []Act, base Time, anomaly Anomaly, what, did string) []Violation {
	d := &describer{base: base}
	var out []Violation
	for _, a := range acts {
		var later *Tenure
		for i := range ts {
			t := &ts[i]
			if t.Name == a.Name && t.Token > a.Token && t.From < a.At && (later == nil || t.From < later.From) {
				later = t
			}
		}
		if later != nil {
			out = append(out, Violation{Key: a.Name, Anomaly: anomaly, Text: fmt.Sprintf(
				"client %d's %s of %s with %s, sent at %s, %s after client %d had been granted it with %s (at %s)",
				a.Client, what, quote(a.Name), tokenText(a.Token), d.at(a.At), did, later.Client, tokenText(later.Token), d.at(later.From))})
		}
	}
	return out
}

// tenureKey is a tenure's identity: the name, the holder and its token.
type tenureKey struct {
	name   string
	client int
	token  int64
}

// latestTenures maps each tenure's identity to its span that ends last.
func latestTenures(ts []Tenure) map[tenureKey]Tenure {
	latest := map[tenureKey]Tenure{}
	for _, t := range ts {
		k := tenureKey{t.Name, t.Client, t.Token}
		if l, ok := latest[k]; !ok || t.To > l.To {
			latest[k] = t
		}
	}
	return latest
}
