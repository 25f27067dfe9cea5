package localpg

import (
	"context"
	"syscall"
	"testing"

	"github.com/lockfree-go/lockfree/internal/testdb"
)

// A port found free but bound by another process before the server binds it
// (nothing listens there, so the probe cannot see it) costs one more try on
// another port, not the start.
func TestStartPortTakenMeanwhile(t *testing.T) {
	if !Available() {
		testdb.Missing(t, "PostgreSQL binaries", "initdb and pg_ctl not found")
	}
	// Bound, not listening, no SO_REUSEADDR: the server's bind fails.
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	taken := sa.(*syscall.SockaddrInet4).Port
	picks := 0
	pickPort = func() (int, error) {
		picks++
		if picks == 1 {
			return taken, nil
		}
		return freePort()
	}
	t.Cleanup(func() { pickPort = freePort })

	s, err := Start(context.Background())
	if err != nil {
		t.Fatalf("Start with its first port taken: %v", err)
	}
	defer s.Stop()
	if s.port == taken || picks != 2 {
		t.Fatalf("on port %d after %d picks; %d was taken", s.port, picks, taken)
	}
}
