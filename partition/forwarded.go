package partition

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ForwardedHeader marks a request that Forward proxied to its key's owner.
// Members sign it with ForwardConfig.Secret. Forward honours it (does not
// forward the request again) only when its signature is valid, and hands
// serve the request with the header set to the forwarding member's name, or
// without the header: a client cannot set it.
const ForwardedHeader = "Lockfree-Forwarded-By"

// MinSecretLen is the shortest ForwardConfig.Secret accepted, in bytes.
const MinSecretLen = 32

// forwardSkew is how old (or how far ahead, on this member's clock) a
// signed ForwardedHeader may be: it allows for clock skew between members,
// and limits the replay of a header copied from a member's traffic.
const forwardSkew = time.Minute

// ForwardConfig configures Forward on a member (Config.Forward). A nil
// *ForwardConfig means the defaults.
type ForwardConfig struct {
	// Secret is how members recognise each other. A member that proxies a
	// request signs its ForwardedHeader with it: HMAC-SHA256 over the
	// member's name, the time, and the request's method, host, path and
	// query. A member honours the header only with a valid signature made
	// less than a minute ago, on its own clock. Every member of the fleet
	// must have the same Secret: at least MinSecretLen random bytes, kept
	// from clients like a password. Defaults to none: then Forward proxies
	// nothing (a request for a key another member owns gets 503) and
	// honours no ForwardedHeader.
	Secret []byte
	// MaxRequestBody is the largest request body Forward reads, in bytes;
	// a larger one gets 413 Content Too Large, and serve does not run.
	// Defaults to 1 MiB.
	MaxRequestBody int64
	// RequestBodyTimeout bounds the reading of a request body, from when
	// Forward starts to read it (Server.ReadHeaderTimeout bounds the
	// headers); a client that has not sent it all by then gets 408 Request
	// Timeout, and serve does not run. Forward sets it as the read deadline
	// of the request (http.ResponseController) and clears it once the body
	// is read, replacing Server.ReadTimeout's deadline for that request.
	// Behind a ResponseWriter that cannot set one, the body is read without
	// a deadline — still before serve is queued. Defaults to 30s.
	RequestBodyTimeout time.Duration
}

func (c *ForwardConfig) withDefaults() ForwardConfig {
	var d ForwardConfig
	if c != nil {
		d = *c
	}
	d.Secret = bytes.Clone(d.Secret) // the caller's slice may change
	if d.MaxRequestBody == 0 {
		d.MaxRequestBody = 1 << 20
	}
	if d.RequestBodyTimeout == 0 {
		d.RequestBodyTimeout = 30 * time.Second
	}
	return d
}

func (c ForwardConfig) validate() error {
	switch {
	case len(c.Secret) > 0 && len(c.Secret) < MinSecretLen:
		return fmt.Errorf("%w: forward secret of %d bytes, shorter than %d", ErrInvalid, len(c.Secret), MinSecretLen)
	case c.MaxRequestBody < 0:
		return fmt.Errorf("%w: negative MaxRequestBody %d", ErrInvalid, c.MaxRequestBody)
	case c.RequestBodyTimeout < 0:
		return fmt.Errorf("%w: negative RequestBodyTimeout %v", ErrInvalid, c.RequestBodyTimeout)
	}
	return nil
}

var forwardEncoding = base64.RawURLEncoding

// signForward returns the ForwardedHeader with which this member forwards
// r, at now. Its value is "1.<unix seconds>.<name>.<signature>", the name
// and the signature in unpadded base64url (a name may hold any UTF-8).
func (m *Member) signForward(r *http.Request, now time.Time) string {
	t := now.Unix()
	return "1." + strconv.FormatInt(t, 10) + "." + forwardEncoding.EncodeToString([]byte(m.cfg.Name)) + "." +
		forwardEncoding.EncodeToString(forwardMAC(m.fwd.Secret, m.cfg.Name, t, r))
}

// forwardedBy returns the name of the member that forwarded r, or "" unless
// r carries exactly one ForwardedHeader signed with this member's Secret,
// for r, within forwardSkew of now.
func (m *Member) forwardedBy(r *http.Request, now time.Time) string {
	values := r.Header.Values(ForwardedHeader)
	if len(m.fwd.Secret) == 0 || len(values) != 1 {
		return ""
	}
	parts := strings.Split(values[0], ".")
	if len(parts) != 4 || parts[0] != "1" {
		return ""
	}
	t, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return ""
	}
	if d := now.Unix() - t; d > int64(forwardSkew/time.Second) || d < -int64(forwardSkew/time.Second) {
		return ""
	}
	name, err := forwardEncoding.DecodeString(parts[2])
	if err != nil || validName("member name", string(name), false) != nil {
		return ""
	}
	sig, err := forwardEncoding.DecodeString(parts[3])
	if err != nil || !hmac.Equal(sig, forwardMAC(m.fwd.Secret, string(name), t, r)) {
		return ""
	}
	return string(name)
}

// forwardMAC signs a request forwarded by name at unix time t. Each field
// is prefixed with its length, so that no two field lists sign alike.
func forwardMAC(secret []byte, name string, t int64, r *http.Request) []byte {
	h := hmac.New(sha256.New, secret)
	for _, f := range []string{"lockfree forward 1", name, strconv.FormatInt(t, 10), r.Method, r.Host, r.URL.Path, r.URL.RawQuery} {
		fmt.Fprintf(h, "%d:%s", len(f), f)
	}
	return h.Sum(nil)
}
