package atomic_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/lockfree-go/lockfree/atomic"
)

// Selling stock: the check and the decrement are one step, so two buyers of
// the last unit cannot both succeed. With PostgreSQL the same calls run on
// the user's own table:
//
//	inv, err := atomic.NewPostgres(pool, atomic.Table{Name: "inventory", Key: "sku", Value: "quantity"})
func Example() {
	ctx := context.Background()
	inv, _ := atomic.NewMemory(nil) // the default floor, 0: never below zero
	inv.Claim(ctx, "sku-1", 3)

	left, err := inv.Decrement(ctx, "sku-1", 2)
	fmt.Println(left, err)

	_, err = inv.Decrement(ctx, "sku-1", 2)
	var short *atomic.InsufficientError
	if errors.As(err, &short) {
		fmt.Printf("only %d of %q left\n", short.Actual, short.Key)
	}
	_, err = inv.Decrement(ctx, "sku-404", 1)
	fmt.Println(errors.Is(err, atomic.ErrNotFound))
	// Output:
	// 1 <nil>
	// only 1 of "sku-1" left
	// true
}

// An order with several lines takes all of them or none.
func ExampleMemory_DecrementMany() {
	ctx := context.Background()
	inv, _ := atomic.NewMemory(nil)
	inv.Claim(ctx, "apple", 5)
	inv.Claim(ctx, "pear", 1)

	left, err := inv.DecrementMany(ctx, map[string]int64{"apple": 2, "pear": 1})
	fmt.Println(left["apple"], left["pear"], err)

	_, err = inv.DecrementMany(ctx, map[string]int64{"apple": 2, "pear": 1})
	fmt.Println(err)
	apples, _ := inv.Value(ctx, "apple")
	fmt.Println("apples still", apples)
	// Output:
	// 3 0 <nil>
	// atomic: decrement many "pear" by 1: insufficient value 0 (floor 0)
	// apples still 3
}

// Seats with a capacity: an increment that would pass the cap is refused.
func ExampleMemory_Increment() {
	ctx := context.Background()
	seats, _ := atomic.NewMemory(nil)
	seats.Claim(ctx, "talk-42", 0)
	for range 3 {
		n, err := seats.Increment(ctx, "talk-42", 1, 2)
		fmt.Println(n, err)
	}
	// Output:
	// 1 <nil>
	// 2 <nil>
	// 0 atomic: increment "talk-42" by 1: value 2 would exceed cap 2
}

// Claim-once: the first claim of a key wins; later ones learn who won.
func ExampleMemory_Claim() {
	ctx := context.Background()
	claims, _ := atomic.NewMemory(nil)
	fmt.Println(claims.Claim(ctx, "coupon-XYZ", 1001))
	err := claims.Claim(ctx, "coupon-XYZ", 2002)
	var c *atomic.ConflictError
	if errors.As(err, &c) {
		fmt.Println("already claimed by", c.Actual)
	}
	// Output:
	// <nil>
	// already claimed by 1001
}

// A high-water mark and a compare-and-set.
func ExampleMemory_SetIfGreater() {
	ctx := context.Background()
	marks, _ := atomic.NewMemory(nil)
	marks.Claim(ctx, "offset", 10)
	fmt.Println(marks.SetIfGreater(ctx, "offset", 12))
	fmt.Println(marks.SetIfGreater(ctx, "offset", 11))
	fmt.Println(marks.CompareAndSet(ctx, "offset", 12, 20))
	fmt.Println(errors.Is(marks.CompareAndSet(ctx, "offset", 12, 30), atomic.ErrConflict))
	// Output:
	// <nil>
	// atomic: set-if-greater "offset": 11 is not greater than 12
	// <nil>
	// true
}

// Many buyers of one hot item in one process: a Coalescer sends the
// operations that wait together in one step (one statement and one commit
// on PostgreSQL), and each buyer gets what running them one after another
// would give it. ApplyInOrder is that step.
func ExampleCoalescer() {
	ctx := context.Background()
	inv, _ := atomic.NewMemory(nil)
	inv.Claim(ctx, "sku-1", 5)
	inv.Claim(ctx, "case-1", 1)
	shelf, _ := atomic.NewCoalescer(inv, nil)

	left, err := shelf.Decrement(ctx, "sku-1", 2)
	fmt.Println(left, err)

	// The step a Coalescer sends for a buyer, a basket of an item and its
	// case, a second buyer, a restock (cap 6) and a third buyer, who
	// arrived together:
	results, _ := inv.ApplyInOrder(ctx, []atomic.Op{
		atomic.DecrementOp("sku-1", 2),
		atomic.DecrementManyOp(map[string]int64{"sku-1": 1, "case-1": 1}),
		atomic.DecrementOp("sku-1", 2),
		atomic.IncrementOp("sku-1", 5, 6),
		atomic.DecrementOp("sku-1", 1),
	})
	for _, r := range results {
		fmt.Println(r.Value, r.Values, r.Err)
	}
	// Output:
	// 3 <nil>
	// 1 map[] <nil>
	// 0 map[case-1:0 sku-1:0] <nil>
	// 0 map[] atomic: decrement "sku-1" by 2: insufficient value 0 (floor 0)
	// 5 map[] <nil>
	// 4 map[] <nil>
}
