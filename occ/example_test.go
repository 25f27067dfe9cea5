package occ_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/occ"
)

// Account is a row of the user's table:
//
//	CREATE TABLE accounts (id text PRIMARY KEY, balance bigint NOT NULL, version bigint NOT NULL);
type Account struct {
	ID      string `db:"id"`
	Balance int64  `db:"balance"`
	Version int64  `db:"version"`
}

// The retrying read-modify-write. With PostgreSQL, only the constructor
// changes: occ.NewPostgres[string, Account](pool, "accounts", nil).
func Example() {
	ctx := context.Background()
	accounts, err := occ.NewMemory[string, Account](nil)
	if err != nil {
		panic(err)
	}
	if _, err := accounts.Insert(ctx, Account{ID: "alice", Balance: 100}); err != nil {
		panic(err)
	}
	v, err := occ.Update(ctx, accounts, "alice", func(a *Account) error {
		if a.Balance < 30 {
			return errors.New("insufficient funds") // ends Update, nothing written
		}
		a.Balance -= 30
		return nil
	})
	fmt.Println(v, err)
	a, _, _ := accounts.Load(ctx, "alice")
	fmt.Printf("%+v\n", a)
	// Output:
	// 2 <nil>
	// {ID:alice Balance:70 Version:2}
}

// A writer that read version 1 and writes after someone else gets a
// conflict with both versions, instead of overwriting.
func ExampleConflictError() {
	ctx := context.Background()
	accounts, _ := occ.NewMemory[string, Account](nil)
	accounts.Insert(ctx, Account{ID: "bob", Balance: 10})

	stale, v, _ := accounts.Load(ctx, "bob")
	occ.Update(ctx, accounts, "bob", func(a *Account) error { a.Balance += 5; return nil })

	stale.Balance = 0
	_, err := accounts.Update(ctx, stale, v)
	var c *occ.ConflictError
	fmt.Println(errors.Is(err, occ.ErrConflict), errors.As(err, &c), c.Expected, c.Actual)

	err = accounts.Delete(ctx, "nobody", 1)
	fmt.Println(errors.Is(err, occ.ErrNotFound), errors.Is(err, occ.ErrConflict))
	// Output:
	// true true 1 2
	// true false
}

func ExampleRetryOnConflict() {
	ctx := context.Background()
	accounts, _ := occ.NewMemory[string, Account](nil)
	accounts.Insert(ctx, Account{ID: "carol"})

	attempts := 0
	err := occ.RetryOnConflict(ctx, func(ctx context.Context) error {
		attempts++
		a, v, err := accounts.Load(ctx, "carol") // re-read on every attempt
		if err != nil {
			return err
		}
		if attempts == 1 { // someone else writes in between
			occ.Update(ctx, accounts, "carol", func(a *Account) error { a.Balance++; return nil })
		}
		a.Balance += 10
		_, err = accounts.Update(ctx, a, v)
		return err
	}, occ.WithBackoff(occ.DefaultBackoff))
	a, _, _ := accounts.Load(ctx, "carol")
	fmt.Println(attempts, err, a.Balance)
	// Output: 2 <nil> 11
}

// A PUT handler: the client sends back the ETag it read; a stale one gets
// 412, a missing one 428.
func ExampleCheckIfMatch() {
	ctx := context.Background()
	accounts, _ := occ.NewMemory[string, Account](nil)
	accounts.Insert(ctx, Account{ID: "dave", Balance: 1})

	put := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, v, err := accounts.Load(r.Context(), "dave")
		if occ.WriteError(w, err) {
			return
		}
		if !occ.CheckIfMatch(w, r, v, true) {
			return
		}
		a.Balance = 2
		nv, err := accounts.Update(r.Context(), a, v) // a conflict here is a 412 too
		if occ.WriteError(w, err) {
			return
		}
		w.Header().Set("ETag", occ.ETag(nv))
	})
	for _, ifMatch := range []string{"", `"v1"`, `"v1"`} {
		req := httptest.NewRequest("PUT", "/accounts/dave", nil)
		if ifMatch != "" {
			req.Header.Set("If-Match", ifMatch)
		}
		rec := httptest.NewRecorder()
		put.ServeHTTP(rec, req)
		fmt.Println(rec.Code, "ETag:"+rec.Header().Get("ETag"))
	}
	// Output:
	// 428 ETag:
	// 200 ETag:"v2"
	// 412 ETag:"v2"
}

// The fenced-lock twin of Update, for comparison: lock, fenced read, mutate,
// fenced write, release.
func ExampleFenced() {
	ctx := context.Background()
	accounts, _ := occ.NewMemory[string, Account](nil)
	accounts.Insert(ctx, Account{ID: "erin", Balance: 5})
	locks, _ := fencedlock.NewMemory(nil)
	twin, err := occ.NewFenced(locks, accounts, nil)
	if err != nil {
		panic(err)
	}
	v, err := twin.Update(ctx, "erin", func(a *Account) error { a.Balance *= 2; return nil })
	a, _, _ := accounts.Load(ctx, "erin")
	fmt.Println(v, err, a.Balance)
	// Output: 2 <nil> 10
}
