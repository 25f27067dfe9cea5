package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/occ"
)

// The replacement over HTTP: the version travels as ETag and If-Match.

// handler serves one document over HTTP: GET answers the body with its
// version as ETag; PUT replaces the body only if If-Match names the current
// version (412 Precondition Failed otherwise, 428 Precondition Required
// without it).
func handler(docs occ.Store[string, Document]) http.Handler {
	return occ.RequireIfMatch(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := strings.TrimPrefix(r.URL.Path, "/documents/")
		d, v, err := docs.Load(r.Context(), id)
		if occ.WriteError(w, err) {
			return
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		switch r.Method {
		case http.MethodGet:
			w.Header().Set("ETag", occ.ETag(v))
			_, _ = io.WriteString(w, d.Body)
		case http.MethodPut:
			if !occ.CheckIfMatch(w, r, v, true) {
				return
			}
			body, _ := io.ReadAll(r.Body)
			d.Body = string(body)
			nv, err := docs.Update(r.Context(), d, v) // a save in between makes this a 412 too
			if occ.WriteError(w, err) {
				return
			}
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.Header().Set("ETag", occ.ETag(nv))
		default:
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		}
	}))
}

// overHTTP is the human-speed version of the same race: Alice and Bob open
// the document in their browsers, both edit, Bob saves first.
func overHTTP(ctx context.Context, db *pgxpool.Pool, docs occ.Store[string, Document], w io.Writer) error {
	if err := insertFresh(ctx, db, docs, "guide"); err != nil {
		return err
	}
	srv := httptest.NewServer(handler(docs))
	defer srv.Close()
	url := srv.URL + "/documents/guide"
	do := func(who, method, ifMatch, body string) (string, error) {
		req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
		if err != nil {
			return "", err
		}
		if ifMatch != "" {
			req.Header.Set("If-Match", ifMatch)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return "", err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if method == http.MethodPut {
			cond := "no If-Match"
			if ifMatch != "" {
				cond = "If-Match " + ifMatch
			}
			fmt.Fprintf(w, "http: %-5s PUT with %s → %s", who, cond, resp.Status)
			if tag := resp.Header.Get("ETag"); tag != "" {
				fmt.Fprintf(w, ", ETag %s", tag)
			}
			fmt.Fprintln(w)
		}
		return resp.Header.Get("ETag"), nil
	}
	alice, err := do("Alice", http.MethodGet, "", "")
	if err != nil {
		return err
	}
	bob, err := do("Bob", http.MethodGet, "", "")
	if err != nil {
		return err
	}
	steps := []struct{ who, ifMatch, body string }{
		{"Bob", bob, title + "- Bob's edit\n"},
		{"Alice", alice, title + "- Alice's edit\n"}, // based on the version Bob replaced: 412
		{"Alice", "", title + "- Alice's edit\n"},    // no If-Match: 428
	}
	for _, s := range steps {
		if _, err := do(s.who, http.MethodPut, s.ifMatch, s.body); err != nil {
			return err
		}
	}
	// Alice reloads, merges her edit into Bob's version, and saves again.
	current, err := do("Alice", http.MethodGet, "", "")
	if err != nil {
		return err
	}
	_, err = do("Alice", http.MethodPut, current, title+"- Bob's edit\n- Alice's edit\n")
	return err
}
