package idempotency_test

import (
	"errors"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/idempotency"
)

// A renewal interval that reaches the end of the safety margin would never
// renew in time: NewLeased refuses it, and other impossible settings.
func TestNewLeasedRejectsUnsafeTimings(t *testing.T) {
	t.Parallel()
	store, _ := idempotency.NewMemory(nil, nil)
	const ttl = 10 * time.Second
	for _, tc := range []struct {
		name string
		cfg  idempotency.LeasedConfig
		ok   bool
	}{
		{"defaults", idempotency.LeasedConfig{}, true},
		{"renew before the margin", idempotency.LeasedConfig{TTL: ttl, Margin: 2 * time.Second, RenewInterval: 7 * time.Second}, true},
		{"wide margin, default renewal", idempotency.LeasedConfig{TTL: ttl, Margin: 9 * time.Second}, true},
		{"renew at TTL - margin", idempotency.LeasedConfig{TTL: ttl, Margin: 2 * time.Second, RenewInterval: 8 * time.Second}, false},
		{"renew at TTL", idempotency.LeasedConfig{TTL: ttl, RenewInterval: ttl}, false},
		{"renew past TTL - default margin", idempotency.LeasedConfig{TTL: ttl, RenewInterval: 9 * time.Second}, false},
		{"negative renewal", idempotency.LeasedConfig{TTL: ttl, RenewInterval: -time.Second}, false},
		{"margin of the whole TTL", idempotency.LeasedConfig{TTL: ttl, Margin: ttl}, false},
		{"negative margin", idempotency.LeasedConfig{TTL: ttl, Margin: -time.Second}, false},
		{"negative write timeout", idempotency.LeasedConfig{WriteTimeout: -time.Second}, false},
	} {
		_, err := idempotency.NewLeased(store, &tc.cfg)
		if tc.ok && err != nil || !tc.ok && !errors.Is(err, idempotency.ErrInvalid) {
			t.Errorf("%s: NewLeased(%+v) = %v", tc.name, tc.cfg, err)
		}
	}
}
