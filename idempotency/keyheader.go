package idempotency

import (
	"fmt"
	"strings"
)

// ParseKeyHeader returns the key carried by the Idempotency-Key header
// values: a structured-field string ("…", with \" and \\ escapes, optional
// parameters after it ignored) or a raw token of visible ASCII. It returns
// an error matching ErrInvalid for several values, an empty key, a key
// longer than MaxKeyLen bytes, or a malformed one.
func ParseKeyHeader(values []string) (string, error) {
	if len(values) != 1 {
		return "", fmt.Errorf("%w: %d Idempotency-Key headers, want one", ErrInvalid, len(values))
	}
	v := strings.Trim(values[0], " \t")
	parse := parseToken
	if strings.HasPrefix(v, `"`) {
		parse = parseQuoted
	}
	key, err := parse(v)
	switch {
	case err != nil:
		return "", err
	case key == "":
		return "", fmt.Errorf("%w: empty Idempotency-Key", ErrInvalid)
	case len(key) > MaxKeyLen:
		return "", fmt.Errorf("%w: Idempotency-Key is %d bytes, longer than %d", ErrInvalid, len(key), MaxKeyLen)
	}
	return key, nil
}

// parseQuoted reads a structured-field string: printable ASCII between
// quotes, \" and \\ escaped, and nothing after it but parameters (;…).
func parseQuoted(v string) (string, error) {
	var b strings.Builder
	closed := false
	i := 1
	for ; i < len(v); i++ {
		ch := v[i]
		if ch == '\\' {
			i++
			if i == len(v) || (v[i] != '"' && v[i] != '\\') {
				return "", fmt.Errorf("%w: bad escape in Idempotency-Key", ErrInvalid)
			}
			b.WriteByte(v[i])
			continue
		}
		if ch == '"' {
			closed = true
			break
		}
		if ch < 0x20 || ch > 0x7e {
			return "", fmt.Errorf("%w: Idempotency-Key has a non-printable character", ErrInvalid)
		}
		b.WriteByte(ch)
	}
	if rest := v[min(i+1, len(v)):]; !closed || (rest != "" && !strings.HasPrefix(rest, ";")) {
		return "", fmt.Errorf("%w: malformed quoted Idempotency-Key", ErrInvalid)
	}
	return b.String(), nil
}

// parseToken reads a raw key: visible ASCII without quotes.
func parseToken(v string) (string, error) {
	for i := 0; i < len(v); i++ {
		if v[i] <= 0x20 || v[i] > 0x7e || v[i] == '"' {
			return "", fmt.Errorf("%w: Idempotency-Key has a character outside visible ASCII", ErrInvalid)
		}
	}
	return v, nil
}
