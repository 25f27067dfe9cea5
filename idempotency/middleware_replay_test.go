package idempotency_test

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/lockfree-go/lockfree/idempotency"
	"github.com/lockfree-go/lockfree/internal/testdb"
)

// rawPost sends a POST that asks for gzip itself, so that the client hands
// back the body and its headers as they came.
func rawPost(t *testing.T, url, key string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader([]byte(`{"report":1}`)))
	req.Header.Set(idempotency.HeaderKey, key)
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

// A replay is the first answer: the same status, the same body bytes and
// the same headers that describe the body — a gzip body stays labelled gzip.
func TestMiddlewareReplayIsTheFirstAnswer(t *testing.T) {
	t.Parallel()
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(`{"report":"rapport annuel"}`))
	zw.Close()
	described := http.Header{
		"Content-Type":        {"application/json"},
		"Content-Encoding":    {"gzip"},
		"Content-Language":    {"fr"},
		"Content-Disposition": {"attachment; filename=\"caf\xe9.json\""}, // obs-text: Latin-1
		"Vary":                {"Accept-Encoding", "Accept-Language"},
		"Location":            {"/reports/1"},
		"Etag":                {`"r1"`},
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, v := range described {
			w.Header()[k] = v
		}
		w.WriteHeader(http.StatusCreated)
		w.Write(gz.Bytes())
	})
	backends := map[string]func(t *testing.T) idempotency.Executor{
		"memory": func(t *testing.T) idempotency.Executor { s, _ := idempotency.NewMemory(nil); return s },
		"postgres": func(t *testing.T) idempotency.Executor {
			return newPostgres(t, testdb.New(t, idempotency.Migrations()...), nil)
		},
		"leased on postgres": func(t *testing.T) idempotency.Executor {
			l, _ := idempotency.NewLeased(newPostgres(t, testdb.New(t, idempotency.Migrations()...), nil), nil)
			return l
		},
		"fenced on postgres": func(t *testing.T) idempotency.Executor {
			f, _ := idempotency.NewFenced(memoryLocks(nil), newPostgres(t, testdb.New(t, idempotency.Migrations()...), nil), nil)
			return f
		},
	}
	for name, newExec := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(newMiddleware(t, newExec(t), global)(handler))
			defer srv.Close()
			first, firstBody := rawPost(t, srv.URL, "k")
			replay, replayBody := rawPost(t, srv.URL, "k")
			if replay.Header.Get(idempotency.HeaderReplayed) != "true" {
				t.Fatalf("second answer not replayed: %v", replay.Header)
			}
			if first.StatusCode != 201 || replay.StatusCode != first.StatusCode || !bytes.Equal(firstBody, gz.Bytes()) || !bytes.Equal(replayBody, firstBody) {
				t.Fatalf("replay %d (%d bytes) differs from the first answer %d (%d bytes)", replay.StatusCode, len(replayBody), first.StatusCode, len(firstBody))
			}
			for k, v := range described {
				if got := replay.Header[k]; !equalValues(got, v) || !equalValues(first.Header[k], v) {
					t.Errorf("%s: first %q, replay %q, want %q", k, first.Header[k], got, v)
				}
			}
		})
	}
}

func equalValues(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
