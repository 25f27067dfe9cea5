package occ_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/lockfree-go/lockfree/occ"
	"github.com/lockfree-go/lockfree/occ/occtest"
)

func TestETag(t *testing.T) {
	t.Parallel()
	if got := occ.ETag(12); got != `"v12"` {
		t.Fatalf("ETag(12) = %s", got)
	}
	for _, v := range []int64{1, 12, 1<<63 - 1} {
		if got, err := occ.ParseETag(occ.ETag(v)); err != nil || got != v {
			t.Fatalf("ParseETag(ETag(%d)) = %d, %v", v, got, err)
		}
	}
	for _, bad := range []string{``, `v1`, `"v"`, `"1"`, `W/"v1"`, `"v0"`, `"v-1"`, `"v01"`, `"v1 "`, `"v99999999999999999999"`} {
		if _, err := occ.ParseETag(bad); !errors.Is(err, occ.ErrBadPrecondition) {
			t.Errorf("ParseETag(%q): %v, want ErrBadPrecondition", bad, err)
		}
	}
}

func TestParseIfMatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		fields  []string
		bad     bool
		matches []int64 // of versions 0…4
	}{
		{"absent", nil, false, []int64{0, 1, 2, 3, 4}},
		{"star", []string{"*"}, false, []int64{1, 2, 3, 4}},
		{"one tag", []string{`"v3"`}, false, []int64{3}},
		{"list", []string{`"v1", "v3"`}, false, []int64{1, 3}},
		{"list over fields", []string{`"v1"`, ` "v4" `}, false, []int64{1, 4}},
		{"weak never matches", []string{`W/"v3"`}, false, nil},
		{"weak beside strong", []string{`W/"v2" ,"v3"`}, false, []int64{3}},
		{"foreign tag", []string{`"abc"`}, false, nil},
		{"empty list elements", []string{`,"v2",,`}, false, []int64{2}},
		{"unquoted", []string{`v3`}, true, nil},
		{"unterminated", []string{`"v3`}, true, nil},
		{"junk after tag", []string{`"v3" x`}, true, nil},
		{"star in a list", []string{`*, "v3"`}, true, nil},
		{"empty", []string{``}, true, nil},
		{"space inside", []string{`"v 3"`}, true, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for _, f := range tt.fields {
				h.Add("If-Match", f)
			}
			m, err := occ.ParseIfMatch(h)
			if tt.bad {
				if !errors.Is(err, occ.ErrBadPrecondition) {
					t.Fatalf("err = %v, want ErrBadPrecondition", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if m.Present() != (tt.fields != nil) {
				t.Fatalf("Present = %v", m.Present())
			}
			var got []int64
			for v := int64(0); v <= 4; v++ {
				if m.Matches(v) {
					got = append(got, v)
				}
			}
			if !slices.Equal(got, tt.matches) {
				t.Fatalf("matches versions %v, want %v", got, tt.matches)
			}
		})
	}
}

// docServer is a small REST resource over a Memory store: GET returns the
// document with its ETag; PUT and DELETE require If-Match. beforeWrite, when
// set, runs between the precondition check and the write (a concurrent
// writer's window).
func docServer(t *testing.T) (*httptest.Server, *occ.Memory[string, occtest.Doc], *func()) {
	t.Helper()
	store, err := occ.NewMemory[string, occtest.Doc](&occtest.Config)
	if err != nil {
		t.Fatal(err)
	}
	var beforeWrite func()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /docs/{id}", func(w http.ResponseWriter, r *http.Request) {
		d, v, err := store.Load(r.Context(), r.PathValue("id"))
		if occ.WriteError(w, err) {
			return
		}
		w.Header().Set("ETag", occ.ETag(v))
		json.NewEncoder(w).Encode(d)
	})
	mux.HandleFunc("PUT /docs/{id}", func(w http.ResponseWriter, r *http.Request) {
		cur, v, err := store.Load(r.Context(), r.PathValue("id"))
		if err != nil && !errors.Is(err, occ.ErrNotFound) {
			http.Error(w, err.Error(), 500)
			return
		}
		if !occ.CheckIfMatch(w, r, v, true) {
			return
		}
		if err := json.NewDecoder(r.Body).Decode(&cur); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		cur.ID = r.PathValue("id")
		if beforeWrite != nil {
			beforeWrite()
		}
		nv, err := store.Update(r.Context(), cur, v)
		if occ.WriteError(w, err) {
			return
		}
		w.Header().Set("ETag", occ.ETag(nv))
	})
	mux.HandleFunc("DELETE /docs/{id}", func(w http.ResponseWriter, r *http.Request) {
		_, v, err := store.Load(r.Context(), r.PathValue("id"))
		if err != nil && !errors.Is(err, occ.ErrNotFound) {
			http.Error(w, err.Error(), 500)
			return
		}
		if !occ.CheckIfMatch(w, r, v, true) {
			return
		}
		if occ.WriteError(w, store.Delete(r.Context(), r.PathValue("id"), v)) {
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	srv := httptest.NewServer(occ.RequireIfMatch(mux))
	t.Cleanup(srv.Close)
	return srv, store, &beforeWrite
}

func TestHTTPPreconditions(t *testing.T) {
	srv, store, beforeWrite := docServer(t)
	if _, err := store.Insert(ctx, occtest.Doc{ID: "d1", Title: "first"}); err != nil {
		t.Fatal(err)
	}
	do := func(method, ifMatch, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+"/docs/d1", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if ifMatch != "" {
			req.Header.Set("If-Match", ifMatch)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("ETag")
	}
	steps := []struct {
		name          string
		method, match string
		body          string
		status        int
		etag          string
		setup         func()
	}{
		{"read", "GET", "", "", 200, `"v1"`, nil},
		{"write without If-Match", "PUT", "", `{"Title":"x"}`, 428, "", nil},
		{"delete without If-Match", "DELETE", "", "", 428, "", nil},
		{"malformed If-Match", "PUT", `v1`, `{"Title":"x"}`, 400, "", nil},
		{"write with the current version", "PUT", `"v1"`, `{"Title":"second"}`, 200, `"v2"`, nil},
		{"write with a stale version", "PUT", `"v1"`, `{"Title":"lost"}`, 412, `"v2"`, nil},
		{"weak tag is not enough", "PUT", `W/"v2"`, `{"Title":"weak"}`, 412, `"v2"`, nil},
		{"list naming the current version", "PUT", `"v1", "v2"`, `{"Title":"third"}`, 200, `"v3"`, nil},
		{"star", "PUT", `*`, `{"Title":"fourth"}`, 200, `"v4"`, nil},
		{"writer in between check and write", "PUT", `"v4"`, `{"Title":"raced"}`, 412, `"v5"`, func() {
			*beforeWrite = func() {
				*beforeWrite = nil
				if _, err := occ.Update(ctx, store, "d1", func(d *occtest.Doc) error { d.Title = "winner"; return nil }); err != nil {
					t.Error(err)
				}
			}
		}},
		{"stale delete", "DELETE", `"v4"`, "", 412, `"v5"`, nil},
		{"delete", "DELETE", `"v5"`, "", 204, "", nil},
		{"read deleted", "GET", "", "", 404, "", nil},
		{"star on a missing resource", "PUT", `*`, `{"Title":"x"}`, 412, "", nil},
	}
	for _, s := range steps {
		if s.setup != nil {
			s.setup()
		}
		status, etag := do(s.method, s.match, s.body)
		if status != s.status || etag != s.etag {
			t.Fatalf("%s: %d ETag %s, want %d ETag %s", s.name, status, etag, s.status, s.etag)
		}
	}
	if _, _, err := store.Load(ctx, "d1"); !errors.Is(err, occ.ErrNotFound) {
		t.Fatalf("after delete: %v", err)
	}
}

// FuzzIfMatch checks ParseIfMatch and ParseETag against the RFC 9110
// grammar, written out independently below: neither panics, every error is
// an ErrBadPrecondition with a short message, a header parses exactly when
// the grammar accepts it, and Matches agrees with the tags the grammar
// finds. ETag(v) round-trips through ParseETag for every v ≥ 1, and
// ParseETag accepts nothing but ETag's own output. Its seeds run with every
// go test; see docs/occ.md for fuzzing longer.
func FuzzIfMatch(f *testing.F) {
	for _, seed := range []struct {
		a, b string
		v    int64
	}{
		{`"v1"`, ``, 1},
		{`"v1", "v2"`, `"v3"`, 3},
		{`W/"v1"`, `"v2"`, 1},
		{`*`, ``, 7},
		{`*`, `"v1"`, 1},
		{`* , `, `,`, 1},
		{`"a,b"`, `"v12"`, 12},
		{`"a`, `b"`, 1},
		{``, ``, 0},
		{` ,, "v5" ,`, "\t", 5},
		{`"v1" "v2"`, ``, 1},
		{"\"v\x7f\"", ``, 1},
		{"\"\x80\xff\"", `W/""`, -1},
		{`W/*`, ``, 1},
		{`"v01"`, `"v-1"`, 1 << 62},
		{`"v9223372036854775807"`, ``, 1<<63 - 1},
	} {
		f.Add(seed.a, seed.b, seed.v)
	}
	f.Fuzz(func(t *testing.T, a, b string, v int64) {
		checkETag(t, a, v)
		for _, fields := range [][]string{{a}, {a, b}} {
			m, err := occ.ParseIfMatch(http.Header{"If-Match": fields})
			valid, star, strong := rfcIfMatch(strings.Join(fields, ","))
			if err != nil {
				if !errors.Is(err, occ.ErrBadPrecondition) || len(err.Error()) > maxErrLen {
					t.Fatalf("ParseIfMatch(%q): error %q, want a short ErrBadPrecondition", fields, err)
				}
				if valid {
					t.Fatalf("ParseIfMatch(%q) rejected a valid header: %v", fields, err)
				}
				continue
			}
			if !valid {
				t.Fatalf("ParseIfMatch(%q) accepted a malformed header", fields)
			}
			if !m.Present() || m.Matches(0) {
				t.Fatalf("ParseIfMatch(%q): present %v, matches a missing resource %v", fields, m.Present(), m.Matches(0))
			}
			if v >= 1 {
				if want := star || slices.Contains(strong, occ.ETag(v)); m.Matches(v) != want {
					t.Fatalf("ParseIfMatch(%q).Matches(%d) = %v, want %v", fields, v, !want, want)
				}
			}
		}
	})
}

// maxErrLen bounds an error message that quotes input: 64 bytes of it,
// each at most 4 once escaped (\xff), and a few words.
const maxErrLen = 400

func checkETag(t *testing.T, tag string, v int64) {
	if got, err := occ.ParseETag(tag); err != nil {
		if !errors.Is(err, occ.ErrBadPrecondition) || len(err.Error()) > maxErrLen {
			t.Fatalf("ParseETag(%q): error %q, want a short ErrBadPrecondition", tag, err)
		}
	} else if got < 1 || occ.ETag(got) != tag {
		t.Fatalf("ParseETag(%q) = %d, which ETag formats as %s", tag, got, occ.ETag(got))
	}
	got, err := occ.ParseETag(occ.ETag(v))
	switch {
	case v >= 1 && (err != nil || got != v):
		t.Fatalf("ParseETag(ETag(%d)) = %d, %v", v, got, err)
	case v < 1 && !errors.Is(err, occ.ErrBadPrecondition):
		t.Fatalf("ParseETag(ETag(%d)) = %d, %v; want ErrBadPrecondition (versions start at 1)", v, got, err)
	}
}

// rfcIfMatch is the If-Match grammar of RFC 9110 (§13.1.1, §8.8.3, §5.6.1):
//
//	If-Match    = "*" / #entity-tag
//	entity-tag  = [ "W/" ] DQUOTE *etagc DQUOTE
//	etagc       = %x21 / %x23-7E / %x80-FF
//
// with OWS around commas and empty list elements allowed. A header that
// lists nothing is malformed here, as in ParseIfMatch. It returns the strong
// tags, quotes included.
func rfcIfMatch(v string) (valid, star bool, strong []string) {
	elems := 0
	i := 0
	for {
		for i < len(v) && (v[i] == ' ' || v[i] == '\t' || v[i] == ',') {
			i++
		}
		if i == len(v) {
			return elems > 0 && !(star && elems > 1), star, strong
		}
		elems++
		switch {
		case v[i] == '*':
			star = true
			i++
		default:
			weak := strings.HasPrefix(v[i:], "W/")
			if weak {
				i += 2
			}
			if i == len(v) || v[i] != '"' {
				return false, false, nil
			}
			start := i
			for i++; i < len(v) && v[i] != '"'; i++ {
				if c := v[i]; c != 0x21 && (c < 0x23 || c == 0x7f) {
					return false, false, nil
				}
			}
			if i == len(v) {
				return false, false, nil
			}
			i++
			if !weak {
				strong = append(strong, v[start:i])
			}
		}
		for i < len(v) && (v[i] == ' ' || v[i] == '\t') {
			i++
		}
		if i < len(v) && v[i] != ',' {
			return false, false, nil
		}
	}
}
