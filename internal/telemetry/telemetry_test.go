package telemetry_test

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/internal/telemetry"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

func TestListenRefusesBadAddresses(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	for _, addr := range []string{"9090", "localhost", "127.0.0.1:notaport", "256.1.1.1:80", busy.Addr().String()} {
		s, err := telemetry.Listen("--metrics-addr", addr, http.NotFoundHandler(), nil)
		require.ErrorIs(t, err, telemetry.ErrBadAddr, addr)
		require.Nil(t, s)
		require.Contains(t, err.Error(), "--metrics-addr", addr)
		require.Contains(t, err.Error(), addr)
	}
	_, err = telemetry.Start(telemetry.Flags{MetricsAddr: "127.0.0.1:0", PprofAddr: "nope"}, nil)
	require.ErrorIs(t, err, telemetry.ErrBadAddr)
	require.Contains(t, err.Error(), "--pprof-addr")
}

func TestMetricsAndPprofListenersAreSeparate(t *testing.T) {
	e, err := telemetry.Start(telemetry.Flags{MetricsAddr: "127.0.0.1:0", PprofAddr: "127.0.0.1:0"}, nil)
	require.NoError(t, err)
	defer e.Close()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "rollout_test_events_total", Help: "Events of the test."})
	c.Add(3)
	e.Registry.MustRegister(c)

	code, body := get(t, "http://"+e.Metrics.Addr()+"/metrics")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "rollout_test_events_total 3")
	require.Contains(t, body, "go_goroutines")
	problems, err := promlint.New(bytes.NewReader([]byte(body))).Lint()
	require.NoError(t, err)
	require.Empty(t, problems)
	code, _ = get(t, "http://"+e.Metrics.Addr()+"/debug/pprof/")
	require.Equal(t, http.StatusNotFound, code, "the metrics listener serves no profiles")

	code, body = get(t, "http://"+e.Pprof.Addr()+"/debug/pprof/")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "goroutine")
	code, body = get(t, "http://"+e.Pprof.Addr()+"/debug/pprof/goroutine?debug=1")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "goroutine profile:")
	code, body = get(t, "http://"+e.Pprof.Addr()+"/debug/pprof/heap")
	require.Equal(t, http.StatusOK, code)
	require.NotEmpty(t, body)
	code, _ = get(t, "http://"+e.Pprof.Addr()+"/debug/pprof/profile?seconds=1")
	require.Equal(t, http.StatusOK, code)
	code, _ = get(t, "http://"+e.Pprof.Addr()+"/debug/pprof/profile?seconds=-4")
	require.Equal(t, http.StatusBadRequest, code)
	code, _ = get(t, "http://"+e.Pprof.Addr()+"/debug/pprof/nosuch")
	require.Equal(t, http.StatusNotFound, code)
	code, _ = get(t, "http://"+e.Pprof.Addr()+"/metrics")
	require.Equal(t, http.StatusNotFound, code, "the pprof listener serves no metrics")

	// Nothing was registered on the default mux.
	_, pattern := http.DefaultServeMux.Handler(httptest.NewRequest(http.MethodGet, "/debug/pprof/", nil))
	require.Empty(t, pattern)
}

func TestStartWithNoFlagsOpensNothing(t *testing.T) {
	e, err := telemetry.Start(telemetry.Flags{}, nil)
	require.NoError(t, err)
	require.Nil(t, e.Registry)
	require.Nil(t, e.Metrics)
	require.Nil(t, e.Pprof)
	e.Close()
}
