package hint

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// roundTripFunc answers HTTP requests in process.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// FuzzGCPRead: reading instance/preempted never panics on any answer. Only
// a 200 from a metadata server (Metadata-Flavor: Google) whose body is TRUE
// or FALSE (surrounding space allowed) is a reading; anything else is an
// ErrBadResponse with a bounded message.
func FuzzGCPRead(f *testing.F) {
	for _, s := range []struct {
		status int
		flavor bool
		etag   string
		body   string
	}{
		{200, true, "abc", "TRUE"}, {200, true, "abc", "FALSE"}, {200, true, "", " TRUE\n"}, {200, true, "e", "FALSE\r\n"},
		{200, true, "", "true"}, {200, true, "", ""}, {200, true, "", "TRUE FALSE"}, {200, false, "", "TRUE"},
		{404, true, "", "TRUE"}, {503, true, "", ""}, {200, true, "", strings.Repeat("x", 200)},
		{200, true, "", "\xff\xfe" + strings.Repeat("é", 40)}, {200, true, "", strings.Repeat("T", maxBody+1)},
		{0, true, "", "TRUE"}, {999, true, "", "FALSE"},
	} {
		f.Add(s.status, s.flavor, s.etag, []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, status int, flavor bool, etag string, body []byte) {
		if status < 100 || status > 999 {
			status = 200 + (status%100+100)%100 // net/http rejects other codes
		}
		hdr := http.Header{}
		if flavor {
			hdr.Set(GCPFlavorHeader, GCPFlavor)
		}
		hdr.Set("ETag", etag)
		cfg := DefaultGCPConfig()
		cfg.RequestTimeout = 10 * time.Second
		cfg.Client = &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: status, Header: hdr, Body: io.NopCloser(bytes.NewReader(body)), Request: r}, nil
		})}
		g, err := NewGCP(cfg)
		require.NoError(t, err)

		preempted, tag, err := g.read(context.Background(), false, "")
		v := strings.TrimSpace(string(body))
		ok := status == http.StatusOK && flavor && len(body) <= maxBody && (v == "TRUE" || v == "FALSE")
		if !ok {
			require.Error(t, err)
			require.True(t, errors.Is(err, ErrBadResponse), "%v", err)
			require.LessOrEqual(t, len(err.Error()), 512, "error is too long")
			require.False(t, preempted)
			return
		}
		require.NoError(t, err)
		require.Equal(t, v == "TRUE", preempted)
		require.Equal(t, hdr.Get("ETag"), tag)
	})
}
