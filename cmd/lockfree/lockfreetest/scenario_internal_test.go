package lockfreetest

import (
	"errors"
	"testing"
)

// Two tests whose names make one scenario name would run each other's
// Test: the second is refused; the same test registered again (-count=N)
// is not.
func TestRegisterRefusesACollidingName(t *testing.T) {
	test := &Test[struct{}, int]{}
	if _, _, err := register("TestCollide_a", test); err != nil {
		t.Fatal(err)
	}
	if _, _, err := register("TestCollide_a", test); err != nil {
		t.Fatalf("the same test again: %v", err)
	}
	if _, _, err := register("TestCollide/a", test); !errors.Is(err, ErrInvalid) {
		t.Fatalf("TestCollide/a after TestCollide_a: %v, want ErrInvalid", err)
	}
}
