package singlewriter_test

import (
	"context"
	"fmt"

	"github.com/lockfree-go/lockfree/singlewriter"
)

// An account owned by one actor: deposits and withdrawals never race, so the
// balance check and the update need no lock.
func ExampleActor() {
	ctx := context.Background()
	type account struct{ balance int }
	acct, _ := singlewriter.NewActor(account{balance: 100}, nil) // a nil config is valid

	withdraw := func(amount int) error {
		return acct.Do(ctx, func(a *account) error {
			if a.balance < amount {
				return fmt.Errorf("insufficient funds: balance %d, need %d", a.balance, amount)
			}
			a.balance -= amount
			return nil
		})
	}
	fmt.Println(withdraw(70))
	fmt.Println(withdraw(70))
	balance, _ := singlewriter.Ask(ctx, acct, func(a *account) (int, error) { return a.balance, nil })
	fmt.Println("balance:", balance)
	_ = acct.Stop(ctx) // drains accepted commands, then exits
	// Output:
	// <nil>
	// insufficient funds: balance 30, need 70
	// balance: 30
}

// A keyed group: every command for one entity goes to the same shard, in order.
func ExampleGroup() {
	ctx := context.Background()
	counters, _ := singlewriter.NewGroup(4, func(int) map[string]int { return map[string]int{} }, nil)
	for _, key := range []string{"cart-1", "cart-2", "cart-1"} {
		_ = counters.Do(ctx, key, func(m *map[string]int) error { (*m)[key]++; return nil })
	}
	n, _ := singlewriter.Ask(ctx, counters.Actor("cart-1"), func(m *map[string]int) (int, error) { return (*m)["cart-1"], nil })
	fmt.Println("cart-1 updates:", n, "on shard", counters.Shard("cart-1"))
	_ = counters.Stop(ctx)
	// Output: cart-1 updates: 2 on shard 1
}
