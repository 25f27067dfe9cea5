package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/idempotency"
)

// The second request with the same key gets the first one's result, and the
// charge happens once.
func Example() {
	store, _ := idempotency.NewMemory(nil)
	key := idempotency.Key{Tenant: "acme", ID: "order-42"}
	fp := idempotency.NewFingerprint([]byte("POST /charges"), []byte(`{"amount":100}`))
	charges := 0
	charge := func(ctx context.Context) (idempotency.Result, error) {
		charges++
		return idempotency.Result{Status: 201, Body: []byte(fmt.Sprintf("charge #%d", charges))}, nil
	}
	for range 2 {
		res, err := store.Do(context.Background(), key, fp, charge)
		fmt.Println(res.Status, string(res.Body), res.Replayed, err)
	}
	fmt.Println("charges:", charges)
	// Output:
	// 201 charge #1 false <nil>
	// 201 charge #1 true <nil>
	// charges: 1
}

// A key reused for a different request is refused.
func ExampleErrKeyReused() {
	store, _ := idempotency.NewMemory(nil)
	key := idempotency.Key{ID: "k"}
	ok := func(context.Context) (idempotency.Result, error) { return idempotency.Result{Status: 200}, nil }
	store.Do(context.Background(), key, idempotency.NewFingerprint([]byte("amount=100")), ok)
	_, err := store.Do(context.Background(), key, idempotency.NewFingerprint([]byte("amount=999")), ok)
	fmt.Println(errors.Is(err, idempotency.ErrKeyReused))
	// Output: true
}

// Leased mode for an external call: the provider gets a key derived from the
// request's, the same for every attempt, and a retry resumes after the last
// completed step.
func ExampleLeased() {
	store, _ := idempotency.NewMemory(nil)
	leased, _ := idempotency.NewLeased(store, nil)
	key := idempotency.Key{ID: "order-7"}
	fail := true
	work := func(ctx context.Context) (idempotency.Result, error) {
		a, _ := idempotency.AttemptFrom(ctx)
		err := a.Step(ctx, "charge", func(ctx context.Context) error {
			fmt.Println("charging with provider key", a.DeriveKey("charge"))
			return nil
		})
		if err != nil {
			return idempotency.Result{}, err
		}
		err = a.Step(ctx, "ship", func(ctx context.Context) error {
			if fail {
				fail = false
				return errors.New("carrier unavailable")
			}
			fmt.Println("shipping")
			return nil
		})
		return idempotency.Result{Status: 201, Body: []byte("done")}, err
	}
	_, err := leased.Do(context.Background(), key, idempotency.Fingerprint{}, work)
	fmt.Println("first attempt:", err)
	res, err := leased.Do(context.Background(), key, idempotency.Fingerprint{}, work)
	fmt.Println("retry:", string(res.Body), err)
	// Output:
	// charging with provider key d64041b5-c46b-5ad7-a7a7-4a7ffbd88a58
	// first attempt: carrier unavailable
	// shipping
	// retry: done <nil>
}

type userKey struct{}

// authenticate stands for the application's authentication, which runs
// before the idempotency middleware and names the caller.
func authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, ok := map[string]string{"Bearer t-alice": "alice", "Bearer t-bob": "bob"}[r.Header.Get("Authorization")]
		if !ok {
			http.Error(w, "unauthenticated", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), userKey{}, user)))
	})
}

// The middleware in front of a handler, behind the authentication: a retry
// is replayed to its caller, another caller's request with the same key runs
// on its own, and a request without a key is refused.
func ExampleNewMiddleware() {
	store, _ := idempotency.NewMemory(nil)
	orders := 0
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		orders++
		w.Header().Set("Location", fmt.Sprintf("/orders/%d", orders))
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "order %d for %s", orders, r.Context().Value(userKey{}))
	})
	idem, err := idempotency.NewMiddleware(store, handler, &idempotency.MiddlewareConfig{
		// Keys are scoped by the authenticated caller.
		Tenant: func(r *http.Request) (string, error) {
			user, ok := r.Context().Value(userKey{}).(string)
			if !ok {
				return "", errors.New("no authenticated user")
			}
			return user, nil
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	srv := httptest.NewServer(authenticate(idem))
	defer srv.Close()
	for _, call := range []struct{ token, key string }{{"t-alice", `"a1b2"`}, {"t-alice", `"a1b2"`}, {"t-bob", `"a1b2"`}, {"t-bob", ""}} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(`{}`))
		req.Header.Set("Authorization", "Bearer "+call.token)
		if call.key != "" {
			req.Header.Set("Idempotency-Key", call.key)
		}
		resp, _ := http.DefaultClient.Do(req)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%d %q %q %.19s\n", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), resp.Header.Get("Location"), body)
	}
	// Output:
	// 201 "" "/orders/1" order 1 for alice
	// 201 "true" "/orders/1" order 1 for alice
	// 201 "" "/orders/2" order 2 for bob
	// 400 "" "" {"type":"https://pk
}

// Transactional mode in the caller's transaction: the claim, the charge and
// the stored result commit together, or not at all.
func ExamplePostgres_WithDB() {
	ctx := context.Background()
	pool, _ := pgxpool.New(ctx, "postgres://localhost/app")
	store, _ := idempotency.NewPostgres(pool, nil)
	key := idempotency.Key{Tenant: "acme", ID: "order-42"}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		res, err := store.WithDB(tx).Do(ctx, key, idempotency.Fingerprint{}, func(ctx context.Context) (idempotency.Result, error) {
			_, err := tx.Exec(ctx, `INSERT INTO charges (order_id, amount) VALUES ($1, 100)`, key.ID)
			return idempotency.Result{Status: 201}, err
		})
		fmt.Println(res.Status, res.Replayed)
		return err
	})
	if errors.Is(err, idempotency.ErrInFlight) {
		fmt.Println("a duplicate is running; retry later")
	}
}
