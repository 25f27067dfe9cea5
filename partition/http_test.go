package partition_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/partition"
)

// A request for a key that another member owns is proxied to it once; the
// owner serves it on the key's executor.
func TestForward(t *testing.T) {
	t.Parallel()
	store := partition.NewMemory(nil)
	names := []string{"a", "b"}
	members := map[string]*partition.Member{}
	servers := map[string]*httptest.Server{}
	for _, n := range names {
		var h atomic.Pointer[http.Handler]
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*h.Load()).ServeHTTP(w, r) }))
		t.Cleanup(srv.Close)
		cfg := testConfig
		cfg.Name, cfg.Addr = n, strings.TrimPrefix(srv.URL, "http://")
		m, err := partition.NewMember(ctx, cfg, store)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close(ctx) })
		handler := partition.Forward(m, func(r *http.Request) string { return r.URL.Query().Get("key") },
			func(w http.ResponseWriter, r *http.Request, e partition.Epoch) {
				w.Header().Set("X-Served-By", e.Owner)
				fmt.Fprintf(w, "partition %d epoch %d forwarded by %q", e.Partition, e.Token, r.Header.Get(partition.ForwardedHeader))
			})
		h.Store(&handler)
		members[n], servers[n] = m, srv
	}
	// Wait until both members agree and own their share.
	waitFor(t, 30*time.Second, func() bool {
		for _, m := range members {
			r := m.Ring()
			want := 0
			for p := range r.Partitions() {
				if r.Owner(p) == m.Name() {
					want++
				}
			}
			if len(r.Members()) != 2 || len(m.Owned()) != want {
				return false
			}
		}
		return true
	})
	for i := range 20 {
		key := fmt.Sprintf("k%d", i)
		owner, _ := members["a"].Owner(key)
		resp, err := http.Get(servers["a"].URL + "/?key=" + key)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Served-By") != owner {
			t.Fatalf("%s: %d served by %q: %s; want %s", key, resp.StatusCode, resp.Header.Get("X-Served-By"), body, owner)
		}
		wantFwd := map[bool]string{true: `forwarded by ""`, false: `forwarded by "a"`}[owner == "a"]
		if !strings.HasSuffix(string(body), wantFwd) {
			t.Fatalf("%s: %s, want %s", key, body, wantFwd)
		}
	}
	// A forwarded request that reaches a non-owner is not forwarded again.
	var key string
	for i := 0; ; i++ {
		key = fmt.Sprintf("k%d", i)
		if o, _ := members["a"].Owner(key); o == "b" {
			break
		}
	}
	req, _ := http.NewRequest("GET", servers["a"].URL+"/?key="+key, nil)
	req.Header.Set(partition.ForwardedHeader, "b")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("bounced request: %d", resp.StatusCode)
	}
}
