package occ

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/lockfree-go/lockfree/internal/short"
)

// ErrBadPrecondition reports an If-Match header that does not parse as
// RFC 9110 syntax ("*" or a comma-separated list of entity tags).
var ErrBadPrecondition = errors.New("occ: malformed If-Match header")

// ETag formats version as a strong entity tag: version 12 is `"v12"` (with
// the quotes, ready for the ETag header). Versions are opaque to clients;
// they send the tag back in If-Match.
func ETag(version int64) string { return `"v` + strconv.FormatInt(version, 10) + `"` }

// ParseETag returns the version in a strong entity tag made by ETag. A weak
// tag (W/"v12") or any other tag is an ErrBadPrecondition: a weak validator
// cannot guard a write.
func ParseETag(tag string) (int64, error) {
	if len(tag) < 4 || tag[0] != '"' || tag[len(tag)-1] != '"' || tag[1] != 'v' {
		return 0, fmt.Errorf("%w: %s is not a version tag", ErrBadPrecondition, short.Quote(tag))
	}
	v, err := strconv.ParseInt(tag[2:len(tag)-1], 10, 64)
	if err != nil || v < 1 || strconv.FormatInt(v, 10) != tag[2:len(tag)-1] {
		return 0, fmt.Errorf("%w: %s is not a version tag", ErrBadPrecondition, short.Quote(tag))
	}
	return v, nil
}

// IfMatch is a parsed If-Match header. The zero value is an absent header.
type IfMatch struct {
	present bool
	any     bool     // "*"
	strong  []string // opaque tags with their quotes, weak ones dropped
}

// ParseIfMatch parses every If-Match field of h (RFC 9110 §13.1.1): "*" or a
// list of entity tags, weak tags included (they never match: If-Match uses
// the strong comparison). Malformed syntax is an ErrBadPrecondition.
func ParseIfMatch(h http.Header) (IfMatch, error) {
	fields := h.Values("If-Match")
	if len(fields) == 0 {
		return IfMatch{}, nil
	}
	m := IfMatch{present: true}
	s := strings.Join(fields, ",")
	elems := 0
	for {
		s = strings.TrimLeft(s, " \t,")
		if s == "" {
			break
		}
		elems++
		if s[0] == '*' {
			m.any = true
			s = s[1:]
		} else {
			weak := strings.HasPrefix(s, "W/")
			if weak {
				s = s[2:]
			}
			end := -1
			if len(s) > 0 && s[0] == '"' {
				end = strings.IndexByte(s[1:], '"')
			}
			if end < 0 {
				return IfMatch{}, fmt.Errorf("%w: %s", ErrBadPrecondition, short.Quote(strings.Join(fields, ", ")))
			}
			tag := s[:end+2]
			for i := 1; i < len(tag)-1; i++ {
				if c := tag[i]; c < 0x21 || c == 0x7f {
					return IfMatch{}, fmt.Errorf("%w: %s", ErrBadPrecondition, short.Quote(strings.Join(fields, ", ")))
				}
			}
			if !weak {
				m.strong = append(m.strong, tag)
			}
			s = s[end+2:]
		}
		if rest := strings.TrimLeft(s, " \t"); rest != "" && rest[0] != ',' {
			return IfMatch{}, fmt.Errorf("%w: %s", ErrBadPrecondition, short.Quote(strings.Join(fields, ", ")))
		}
	}
	if elems == 0 || (m.any && elems > 1) {
		return IfMatch{}, fmt.Errorf("%w: %s", ErrBadPrecondition, short.Quote(strings.Join(fields, ", ")))
	}
	return m, nil
}

// Present reports whether the request had an If-Match header.
func (m IfMatch) Present() bool { return m.present }

// Matches reports whether a resource at version (0: the resource does not
// exist) satisfies the header: "*" matches any existing resource, a list
// matches if one of its strong tags is ETag(version). An absent header
// matches everything.
func (m IfMatch) Matches(version int64) bool {
	if !m.present {
		return true
	}
	if version < 1 {
		return false
	}
	if m.any {
		return true
	}
	want := ETag(version)
	for _, t := range m.strong {
		if t == want {
			return true
		}
	}
	return false
}

// CheckIfMatch evaluates r's If-Match against the current version of the
// resource (0 when it does not exist) and, when the request must not go on,
// answers it and returns false: 428 Precondition Required when required and
// the header is absent, 400 Bad Request when it is malformed, 412
// Precondition Failed (with the current ETag, if any) when it does not match.
// The handler then writes with Store.Update(ctx, row, current) and answers a
// conflict with WriteError, which closes the gap between this check and the
// write.
func CheckIfMatch(w http.ResponseWriter, r *http.Request, current int64, required bool) bool {
	m, err := ParseIfMatch(r.Header)
	switch {
	case err != nil:
		http.Error(w, err.Error(), http.StatusBadRequest)
		return false
	case !m.Present() && required:
		http.Error(w, "occ: this request requires an If-Match header", http.StatusPreconditionRequired)
		return false
	case !m.Matches(current):
		if current > 0 {
			w.Header().Set("ETag", ETag(current))
		}
		http.Error(w, "occ: If-Match does not match the current version", http.StatusPreconditionFailed)
		return false
	}
	return true
}

// RequireIfMatch is middleware answering 428 Precondition Required to PUT,
// PATCH and DELETE requests without an If-Match header, so that no client
// can write without saying which version it read. Other requests pass.
func RequireIfMatch(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodPut, http.MethodPatch, http.MethodDelete:
			if len(r.Header.Values("If-Match")) == 0 {
				http.Error(w, "occ: this request requires an If-Match header", http.StatusPreconditionRequired)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// WriteError answers a request whose write failed with err, if err is one of
// this package's outcomes, and reports whether it did: a conflict is 412
// Precondition Failed with the row's current ETag, a missing row 404 Not
// Found, bad input 400 Bad Request. Other errors are left to the caller.
func WriteError(w http.ResponseWriter, err error) bool {
	var c *ConflictError
	switch {
	case errors.As(err, &c):
		if c.Actual > 0 {
			w.Header().Set("ETag", ETag(c.Actual))
		}
		http.Error(w, "occ: the resource changed since the version you sent", http.StatusPreconditionFailed)
	case errors.Is(err, ErrNotFound):
		http.Error(w, "occ: not found", http.StatusNotFound)
	case errors.Is(err, ErrInvalid), errors.Is(err, ErrBadPrecondition):
		http.Error(w, err.Error(), http.StatusBadRequest)
	default:
		return false
	}
	return true
}
