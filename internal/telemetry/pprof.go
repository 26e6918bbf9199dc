package telemetry

import (
	"fmt"
	"html"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"sort"
	"strconv"
	"strings"
	"time"
)

// maxProfileSeconds bounds ?seconds= of the CPU profile and the trace.
const maxProfileSeconds = 300

// PprofHandler returns the mux of a pprof listener, serving what
// net/http/pprof serves (the format go tool pprof reads):
//
//	/debug/pprof/               an index of the profiles
//	/debug/pprof/NAME?debug=N   a runtime/pprof profile (heap, goroutine, allocs, block, mutex, threadcreate; ?gc=1 collects garbage before heap)
//	/debug/pprof/profile?seconds=N  a CPU profile (default 30 s)
//	/debug/pprof/trace?seconds=N    an execution trace (default 1 s)
//	/debug/pprof/cmdline        the command line
//
// It is written on runtime/pprof rather than by importing net/http/pprof,
// whose init registers the handlers on http.DefaultServeMux: no other
// server of the process can expose profiles by accident.
func PprofHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprofIndex)
	mux.HandleFunc("/debug/pprof/cmdline", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprint(w, strings.Join(os.Args, "\x00"))
	})
	mux.HandleFunc("/debug/pprof/profile", cpuProfile)
	mux.HandleFunc("/debug/pprof/trace", execTrace)
	return mux
}

// seconds reads ?seconds=, def when absent; ok is false (and the reply
// sent) when it is malformed or out of range.
func seconds(w http.ResponseWriter, r *http.Request, def int) (time.Duration, bool) {
	s := r.URL.Query().Get("seconds")
	if s == "" {
		return time.Duration(def) * time.Second, true
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 || n > maxProfileSeconds {
		http.Error(w, fmt.Sprintf("seconds=%q: want a whole number from 1 to %d", s, maxProfileSeconds), http.StatusBadRequest)
		return 0, false
	}
	return time.Duration(n) * time.Second, true
}

// sleep waits d or until the client goes away.
func sleep(r *http.Request, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
	}
}

func cpuProfile(w http.ResponseWriter, r *http.Request) {
	d, ok := seconds(w, r, 30)
	if !ok {
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="profile"`)
	if err := pprof.StartCPUProfile(w); err != nil {
		http.Error(w, "could not start a CPU profile: "+err.Error(), http.StatusInternalServerError)
		return
	}
	sleep(r, d)
	pprof.StopCPUProfile()
}

func execTrace(w http.ResponseWriter, r *http.Request) {
	d, ok := seconds(w, r, 1)
	if !ok {
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="trace"`)
	if err := trace.Start(w); err != nil {
		http.Error(w, "could not start a trace: "+err.Error(), http.StatusInternalServerError)
		return
	}
	sleep(r, d)
	trace.Stop()
}

// pprofIndex serves the index at /debug/pprof/ and the named profiles
// below it.
func pprofIndex(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, "/debug/pprof/")
	if name == "" {
		profiles := pprof.Profiles()
		sort.Slice(profiles, func(i, j int) bool { return profiles[i].Name() < profiles[j].Name() })
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, "<html><head><title>/debug/pprof/</title></head><body><p>Profiles:</p><ul>\n")
		for _, p := range profiles {
			n := html.EscapeString(p.Name())
			fmt.Fprintf(w, "<li><a href=\"%s?debug=1\">%s</a> (%d)</li>\n", n, n, p.Count())
		}
		fmt.Fprint(w, "<li><a href=\"profile?seconds=30\">profile</a> (CPU, 30 s)</li>\n<li><a href=\"trace?seconds=1\">trace</a> (1 s)</li>\n")
		fmt.Fprint(w, "<li><a href=\"cmdline\">cmdline</a></li>\n</ul></body></html>\n")
		return
	}
	p := pprof.Lookup(name)
	if p == nil {
		http.Error(w, fmt.Sprintf("unknown profile %q", name), http.StatusNotFound)
		return
	}
	debug, _ := strconv.Atoi(r.URL.Query().Get("debug"))
	if name == "heap" && r.URL.Query().Get("gc") == "1" {
		runtime.GC()
	}
	if debug > 0 {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	} else {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", name))
	}
	if err := p.WriteTo(w, debug); err != nil {
		http.Error(w, "writing the profile: "+err.Error(), http.StatusInternalServerError)
	}
}
