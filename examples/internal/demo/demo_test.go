package demo_test

import (
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/lockfree-go/lockfree/examples/internal/demo"
	"github.com/lockfree-go/lockfree/fencedlock"
)

// WhilePaused orders the two sides: rest runs while first is stopped at its
// pause, or after first has returned.
func TestWhilePaused(t *testing.T) {
	cases := []struct {
		name   string
		pause  bool
		pauses bool // first calls paused
		want   []string
	}{
		{"pause", true, true, []string{"first: before", "rest", "first: after"}},
		{"no pause", false, true, []string{"first: before", "first: after", "rest"}},
		{"first ends before its pause", true, false, []string{"first: before", "first: after", "rest"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var (
				mu  sync.Mutex
				got []string
			)
			log := func(s string) { mu.Lock(); got = append(got, s); mu.Unlock() }
			errFirst, errRest := errors.New("first"), errors.New("rest")
			e1, e2 := demo.WhilePaused(c.pause, func(paused func()) error {
				log("first: before")
				if c.pauses {
					paused()
					paused() // only the first call pauses
				}
				log("first: after")
				return errFirst
			}, func() error { log("rest"); return errRest })
			if e1 != errFirst || e2 != errRest {
				t.Errorf("errors %v, %v; want first, rest", e1, e2)
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("order %q, want %q", got, c.want)
			}
		})
	}
}

func TestModes(t *testing.T) {
	for mode, want := range map[string][2]bool{"lock": {true, false}, "alternative": {false, true}, "both": {true, true}} {
		if lock, alt, err := demo.Modes(mode); err != nil || [2]bool{lock, alt} != want {
			t.Errorf("Modes(%q) = %v, %v, %v; want %v", mode, lock, alt, err, want)
		}
	}
	if _, _, err := demo.Modes("sideways"); err == nil {
		t.Error("Modes accepted sideways")
	}
}

// A Row's gate refuses a token lower than one it has admitted.
func TestRowFences(t *testing.T) {
	var r demo.Row[int]
	if err := r.FencedUpdate(2, func(v *int) { *v = 2 }); err != nil {
		t.Fatal(err)
	}
	if _, err := r.FencedGet(1); !errors.Is(err, fencedlock.ErrFenced) {
		t.Errorf("FencedGet(1) after token 2: %v, want ErrFenced", err)
	}
	if err := r.FencedUpdate(1, func(v *int) { *v = 1 }); !errors.Is(err, fencedlock.ErrFenced) {
		t.Errorf("FencedUpdate(1) after token 2: %v, want ErrFenced", err)
	}
	if v := r.Get(); v != 2 {
		t.Errorf("value %d, want 2", v)
	}
}
