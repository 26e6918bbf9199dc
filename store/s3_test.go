package store_test

import (
	"bytes"
	"context"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/store"
	"github.com/rollout/rollout/store/s3test"
)

// TestRealS3: the store against a real S3-compatible server (versitygw on
// loopback): durable put, content-addressed put that uploads once, exists,
// ranged and checked reads, short ranges, missing objects, list under a
// prefix, delete of a run's prefix; and a stopped server is ErrUnavailable
// after the retries, promptly, and the store works again once it is back.
func TestRealS3(t *testing.T) {
	srv := s3test.Start(t)
	srv.Setenv(t)
	ctx := context.Background()
	opts := store.DefaultOptions()
	opts.Attempts, opts.Backoff, opts.MaxBackoff, opts.OpTimeout = 3, 10*time.Millisecond, 50*time.Millisecond, 10*time.Second
	s, err := store.Open(ctx, srv.URL, opts)
	require.NoError(t, err)
	defer s.Close()

	data := []byte(`{"prompt":"a"}` + "\n" + `{"prompt":"b"}` + "\n")
	key, sum, up, err := s.PutContent(ctx, store.InputPrefix("r"), data)
	require.NoError(t, err)
	require.True(t, up)
	_, _, up, err = s.PutContent(ctx, store.InputPrefix("r"), data)
	require.NoError(t, err)
	require.False(t, up, "a second upload of the same content sends nothing")
	// A damaged object of that key (same size, other bytes) is replaced.
	require.NoError(t, s.Put(ctx, key, bytes.ToUpper(data)))
	_, _, up, err = s.PutContent(ctx, store.InputPrefix("r"), data)
	require.NoError(t, err)
	require.True(t, up, "a damaged object of the same key and size was kept")
	ok, err := s.Exists(ctx, key)
	require.NoError(t, err)
	require.True(t, ok)

	b, err := s.ReadRange(ctx, key, 15, 14)
	require.NoError(t, err)
	require.Equal(t, `{"prompt":"b"}`, string(b))
	all, err := s.ReadChecked(ctx, key, 0, int64(len(data)), sum)
	require.NoError(t, err)
	require.Equal(t, data, all)
	_, err = s.ReadChecked(ctx, key, 0, 5, sum)
	require.ErrorIs(t, err, store.ErrHashMismatch)
	_, err = s.ReadRange(ctx, key, 20, 100)
	require.ErrorIs(t, err, store.ErrShortObject)
	_, err = s.ReadRange(ctx, key, 1000, 1)
	require.ErrorIs(t, err, store.ErrShortObject)
	_, err = s.ReadRange(ctx, store.InputPrefix("r")+"none", 0, 1)
	require.ErrorIs(t, err, store.ErrNotFound)

	require.NoError(t, s.Put(ctx, store.ResultPrefix("r")+"x", []byte("{}")))
	require.NoError(t, s.Put(ctx, store.ResultPrefix("r2")+"y", []byte("{}")))
	var keys []string
	require.NoError(t, s.List(ctx, store.RunPrefix("r"), func(o store.Object) error { keys = append(keys, o.Key); return nil }))
	sort.Strings(keys)
	require.Equal(t, []string{key, store.ResultPrefix("r") + "x"}, keys)
	n, err := s.DeletePrefix(ctx, store.RunPrefix("r"))
	require.NoError(t, err)
	require.Equal(t, 2, n)
	ok, err = s.Exists(ctx, key)
	require.NoError(t, err)
	require.False(t, ok)
	ok, err = s.Exists(ctx, store.ResultPrefix("r2")+"y")
	require.NoError(t, err)
	require.True(t, ok, "another run's objects stay")

	srv.Stop()
	start := time.Now()
	err = s.Put(ctx, "k", []byte("x"))
	require.ErrorIs(t, err, store.ErrUnavailable)
	require.Less(t, time.Since(start), 10*time.Second)
	require.NoError(t, srv.Restart())
	require.NoError(t, s.Put(ctx, "k", []byte("x")))
}
