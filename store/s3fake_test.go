package store

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// s3Fake is a minimal S3 endpoint (path style: PUT, HEAD, ranged GET,
// DELETE of /bucket/key) that answers the next failN requests with 500,
// to test the store's retries through the real S3 client.
type s3Fake struct {
	mu      sync.Mutex
	objects map[string][]byte
	failN   int
	deny    bool           // answer every request 403 AccessDenied
	calls   map[string]int // "METHOD key" -> requests
}

func (f *s3Fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := strings.TrimPrefix(r.URL.Path, "/bucket/")
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[r.Method+" "+key]++
	s3err := func(status int, code string) {
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(status)
		if r.Method != http.MethodHead {
			fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>%s</Message></Error>`, code, code)
		}
	}
	if f.failN > 0 {
		f.failN--
		s3err(http.StatusInternalServerError, "InternalError")
		return
	}
	if f.deny {
		s3err(http.StatusForbidden, "AccessDenied")
		return
	}
	obj, ok := f.objects[key]
	switch r.Method {
	case http.MethodPut:
		b, err := io.ReadAll(r.Body)
		if err != nil {
			s3err(http.StatusBadRequest, "IncompleteBody")
			return
		}
		f.objects[key] = b
		w.Header().Set("ETag", `"etag"`)
	case http.MethodDelete:
		delete(f.objects, key)
		w.WriteHeader(http.StatusNoContent)
	case http.MethodHead, http.MethodGet:
		if !ok {
			s3err(http.StatusNotFound, "NoSuchKey")
			return
		}
		w.Header().Set("ETag", `"etag"`)
		w.Header().Set("Last-Modified", time.Unix(0, 0).UTC().Format(http.TimeFormat))
		start, end := 0, len(obj)-1
		if rg := r.Header.Get("Range"); rg != "" {
			a, b, _ := strings.Cut(strings.TrimPrefix(rg, "bytes="), "-")
			start, _ = strconv.Atoi(a)
			end, _ = strconv.Atoi(b)
			if start >= len(obj) {
				s3err(http.StatusRequestedRangeNotSatisfiable, "InvalidRange")
				return
			}
			end = min(end, len(obj)-1)
			w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", start, end, len(obj)))
		}
		w.Header().Set("Content-Length", strconv.Itoa(end-start+1))
		if r.Header.Get("Range") != "" {
			w.WriteHeader(http.StatusPartialContent)
		}
		if r.Method == http.MethodGet {
			_, _ = w.Write(obj[start : end+1])
		}
	default:
		s3err(http.StatusNotImplemented, "NotImplemented")
	}
}

func (f *s3Fake) fail(n int) {
	f.mu.Lock()
	f.failN = n
	f.mu.Unlock()
}

func (f *s3Fake) count(call string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[call]
}

// s3Env sets the environment an S3 client of these tests reads: static
// credentials, one attempt per SDK call (the store does the retrying), no
// shared config or instance metadata, checksums only when required.
func s3Env(t *testing.T) {
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test-secret", "AWS_MAX_ATTEMPTS": "1",
		"AWS_CONFIG_FILE": "/nonexistent", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
		"AWS_EC2_METADATA_DISABLED": "true", "AWS_REQUEST_CHECKSUM_CALCULATION": "when_required",
		"AWS_RESPONSE_CHECKSUM_VALIDATION": "when_required", "AWS_PROFILE": "", "AWS_SESSION_TOKEN": "",
	} {
		t.Setenv(k, v)
	}
}

// TestS3Retries: through the real S3 client, 5xx answers are retried with
// backoff until one succeeds; a 404 is not retried; 5xx on every attempt
// is ErrUnavailable after Options.Attempts requests; a range past the end
// is ErrShortObject.
func TestS3Retries(t *testing.T) {
	s3Env(t)
	fake := &s3Fake{objects: map[string][]byte{}, calls: map[string]int{}}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	ctx := context.Background()
	s, err := Open(ctx, "s3://bucket?endpoint="+srv.URL+"&region=us-east-1&use_path_style=true", fastOptions())
	require.NoError(t, err)
	defer s.Close()

	fake.fail(2)
	require.NoError(t, s.Put(ctx, "k", []byte("0123456789")))
	require.Equal(t, 3, fake.count("PUT k"), "two 500s, then the write")

	// A failed ranged GET is followed by a HEAD (is the object short?):
	// three 500s take two attempts, the third succeeds.
	fake.fail(3)
	b, err := s.ReadRange(ctx, "k", 2, 3)
	require.NoError(t, err)
	require.Equal(t, "234", string(b))
	require.Equal(t, 3, fake.count("GET k"))
	require.Equal(t, 2, fake.count("HEAD k"))

	_, err = s.ReadRange(ctx, "none", 0, 1)
	require.ErrorIs(t, err, ErrNotFound)
	require.Equal(t, 1, fake.count("GET none"), "a 404 is not retried")

	fake.fail(1000)
	_, err = s.ReadRange(ctx, "k", 0, 1)
	require.ErrorIs(t, err, ErrUnavailable)
	require.Equal(t, 3+fastOptions().Attempts, fake.count("GET k"), "one GET per attempt: the client does not retry on its own")
	fake.fail(1000)
	err = s.Put(ctx, "k2", []byte("x"))
	require.ErrorIs(t, err, ErrUnavailable)
	require.ErrorContains(t, err, "k2")
	require.Equal(t, fastOptions().Attempts, fake.count("PUT k2"))
	fake.fail(0)

	_, err = s.ReadRange(ctx, "k", 8, 5)
	require.ErrorIs(t, err, ErrShortObject)
	_, err = s.ReadRange(ctx, "k", 20, 1)
	require.ErrorIs(t, err, ErrShortObject)
}

// TestDeadlineBoundsAStalledStore: a server that accepts requests and never
// answers holds an operation for Options.Deadline, not Attempts ×
// OpTimeout; the error is ErrUnavailable naming the object and the bound,
// and a caller's own cancellation is still reported as such.
func TestDeadlineBoundsAStalledStore(t *testing.T) {
	s3Env(t)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	opts := fastOptions()
	opts.Attempts, opts.OpTimeout, opts.Deadline = 100, 150*time.Millisecond, 400*time.Millisecond
	ctx := context.Background()
	s, err := Open(ctx, "s3://bucket?endpoint="+srv.URL+"&region=us-east-1&use_path_style=true", opts)
	require.NoError(t, err)
	defer s.Close()

	began := time.Now()
	_, err = s.ReadRange(ctx, "in/chunk", 0, 10)
	took := time.Since(began)
	require.ErrorIs(t, err, ErrUnavailable)
	require.ErrorContains(t, err, "in/chunk")
	require.ErrorContains(t, err, "400ms")
	require.Less(t, took, 5*time.Second, "the Deadline did not bound the operation")
	require.GreaterOrEqual(t, took, 400*time.Millisecond)

	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = s.ReadRange(cctx, "in/chunk", 0, 10)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NotErrorIs(t, err, ErrUnavailable)

	bad := fastOptions()
	bad.Deadline = -time.Second
	require.ErrorContains(t, bad.Validate(), "Deadline")
}

// TestS3RefusalIsNotUnreachable: a 403 AccessDenied is the store's answer,
// not an outage: it is not retried and wraps ErrRefused (beside
// ErrUnavailable, which callers match for any store error); 5xx on every
// attempt is ErrUnavailable without ErrRefused (a worker isolates the run
// for that, and fails the item for a refusal).
func TestS3RefusalIsNotUnreachable(t *testing.T) {
	s3Env(t)
	fake := &s3Fake{objects: map[string][]byte{"k": []byte("0123456789")}, calls: map[string]int{}}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	ctx := context.Background()
	s, err := Open(ctx, "s3://bucket?endpoint="+srv.URL+"&region=us-east-1&use_path_style=true", fastOptions())
	require.NoError(t, err)
	defer s.Close()

	fake.mu.Lock()
	fake.deny = true
	fake.mu.Unlock()
	_, err = s.ReadRange(ctx, "k", 0, 1)
	require.ErrorIs(t, err, ErrRefused)
	require.ErrorIs(t, err, ErrUnavailable)
	require.Equal(t, 1, fake.count("GET k"), "a refusal is not retried")
	err = s.Put(ctx, "k2", []byte("x"))
	require.ErrorIs(t, err, ErrRefused)
	require.Equal(t, 1, fake.count("PUT k2"))

	fake.mu.Lock()
	fake.deny = false
	fake.mu.Unlock()
	fake.fail(1000)
	_, err = s.ReadRange(ctx, "k", 0, 1)
	require.ErrorIs(t, err, ErrUnavailable)
	require.NotErrorIs(t, err, ErrRefused, "5xx is an outage, not a refusal")
}
