//go:build linux

package exec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// reapInterval is how often the reaper looks for processes that escaped a
// program's process group (and reaps those of them that ended).
const reapInterval = 500 * time.Millisecond

// reaper finds, ends and reaps the processes a backend's programs started
// that left their program's process group (setsid, a double fork).
//
// The worker process is made the child subreaper (PR_SET_CHILD_SUBREAPER,
// process-wide): a process whose parent dies is reparented to it rather than
// to init, so every descendant of a program stays a descendant of the
// worker. The reaper walks /proc every reapInterval and owns a process that
// descends from the worker and
//   - descends from one of the backend's programs (its ppid chain), or
//   - was owned at an earlier walk (same pid and start time), or
//   - is in the process group of one of its programs, or
//   - carries the backend's tag in its environment (tagEnv, which every
//     program gets and its children inherit).
//
// It never waits for a program itself (os/exec's Wait does) nor for any
// process it does not own, so the exit statuses of other children of the
// worker process stay theirs: it reaps an owned zombie with wait4(pid), one
// pid at a time. A zombie child of the worker that left the worker's
// session is reaped too, even when no walk saw it alive (it then has no
// environment to tell whose it is): nothing else in the worker starts a
// process in a session of its own (a child of the worker that a walk saw
// alive and not owned, such as another backend's program, never is). A process that ended before a walk saw
// it, having left its program's group but not the worker's session (a
// setpgid of its own, then a double fork) is not recognised: it stays a
// zombie until the worker exits.
type reaper struct {
	log     hclog.Logger
	self    int
	sid     int    // the worker's session
	prefix  string // tagEnv=<backend's tag>-: every program's tag starts with it
	adopted string // the tag of a zombie only known as adopted

	mu       sync.Mutex
	programs map[int]string     // pid -> tag of the programs running (os/exec waits for them)
	groups   map[int]groupInfo  // process group id (a program's pid) -> its program
	known    map[procKey]string // processes owned at the last walk -> their program's tag
	foreign  map[procKey]bool   // children of the worker seen alive and not owned (another's)
	stopOnce sync.Once
	quit     chan struct{}
	done     chan struct{}
}

type groupInfo struct {
	tag   string
	start uint64 // the program's start time (clock ticks since boot)
}

type procKey struct {
	pid   int
	start uint64
}

type procInfo struct {
	pid, ppid, pgrp, sid int
	state                byte
	start                uint64
}

// newReaper makes the worker process the child subreaper (logging a
// warning when the kernel refuses) and starts the periodic walk.
func newReaper(log hclog.Logger, backendTag string) *reaper {
	r := &reaper{
		log:      log,
		self:     os.Getpid(),
		adopted:  backendTag + "-adopted",
		prefix:   tagEnv + "=" + backendTag + "-",
		programs: make(map[int]string),
		groups:   make(map[int]groupInfo),
		known:    make(map[procKey]string),
		foreign:  make(map[procKey]bool),
		quit:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	r.sid, _ = unix.Getsid(0)
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		log.Warn("cannot become the child subreaper: a process a program started that leaves its process group and outlives its parent escapes the worker", "error", err)
	}
	go r.loop()
	return r
}

func (r *reaper) loop() {
	defer close(r.done)
	t := time.NewTicker(reapInterval)
	defer t.Stop()
	for {
		select {
		case <-r.quit:
			return
		case <-t.C:
			r.sweep(0, "")
		}
	}
}

// stop ends the periodic walk (finish has ended what was left).
func (r *reaper) stop() {
	r.stopOnce.Do(func() { close(r.quit) })
	<-r.done
}

// spawn runs start (which starts a program with tag and returns its pid)
// under the reaper's lock, so that no walk sees the program before it is
// known as one (and never waited for here).
func (r *reaper) spawn(tag string, start func() (int, error)) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, err := start()
	if err != nil {
		return err
	}
	r.programs[pid] = tag
	if p, err := readProc(pid); err == nil {
		r.groups[pid] = groupInfo{tag: tag, start: p.start}
	}
	return nil
}

// ended forgets the program pid (os/exec has reaped it).
func (r *reaper) ended(pid int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.programs, pid)
}

// sweep walks /proc: it records the owned processes, reaps those that are
// zombies and children of the worker, sends sig (when not 0) to the live
// ones of the program tagged tag ("" for all), and returns how many of
// those are alive.
func (r *reaper) sweep(sig syscall.Signal, tag string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	procs, err := readProcs()
	if err != nil {
		r.log.Debug("cannot walk /proc", "error", err)
		return 0
	}
	owned := r.ownedLocked(procs)
	known := make(map[procKey]string, len(owned))
	alive := 0
	for _, p := range owned {
		t := p.tag
		if p.state == 'Z' || p.state == 'X' {
			if p.ppid == r.self {
				var ws unix.WaitStatus
				if wpid, err := unix.Wait4(p.pid, &ws, unix.WNOHANG, nil); err == nil && wpid == p.pid {
					r.log.Debug("reaped a process a program left behind", "pid", p.pid, "status", ws.ExitStatus())
					continue
				}
			}
			known[procKey{p.pid, p.start}] = t
			continue
		}
		known[procKey{p.pid, p.start}] = t
		if tag != "" && t != tag {
			continue
		}
		alive++
		if sig != 0 {
			if err := syscall.Kill(p.pid, sig); err == nil {
				r.log.Debug("signalled a process a program left behind", "pid", p.pid, "signal", sig)
			}
		}
	}
	r.known = known
	// A group outlives its program while a process is in it.
	inGroup := make(map[int]bool)
	for _, p := range procs {
		inGroup[p.pgrp] = true
	}
	for g := range r.groups {
		if _, running := r.programs[g]; !running && !inGroup[g] {
			delete(r.groups, g)
		}
	}
	return alive
}

type ownedProc struct {
	procInfo
	tag string
}

// ownedLocked returns the processes below the worker that the backend's
// programs started (the programs themselves excluded), each with the tag
// of its program.
func (r *reaper) ownedLocked(procs map[int]procInfo) []ownedProc {
	children := make(map[int][]int)
	for _, p := range procs {
		children[p.ppid] = append(children[p.ppid], p.pid)
	}
	var out []ownedProc
	foreign := make(map[procKey]bool)
	defer func() { r.foreign = foreign }()
	type entry struct {
		pid int
		tag string // the tag its parent is owned under ("" when not)
	}
	queue := []entry{}
	for _, c := range children[r.self] {
		queue = append(queue, entry{pid: c})
	}
	for len(queue) > 0 {
		e := queue[0]
		queue = queue[1:]
		p, ok := procs[e.pid]
		if !ok {
			continue
		}
		tag := e.tag
		if t, isProgram := r.programs[p.pid]; isProgram && p.ppid == r.self {
			for _, c := range children[p.pid] {
				queue = append(queue, entry{pid: c, tag: t})
			}
			continue
		}
		if tag == "" {
			tag = r.known[procKey{p.pid, p.start}]
		}
		if g, ok := r.groups[p.pgrp]; tag == "" && ok && p.start >= g.start {
			tag = g.tag
		}
		if tag == "" && p.state != 'Z' {
			tag = r.environTag(p.pid)
		}
		key := procKey{p.pid, p.start}
		if tag == "" && p.state == 'Z' && p.ppid == r.self && p.sid != r.sid && !r.foreign[key] {
			// Ended before a walk saw it alive, and left the worker's
			// session: an adopted process (the worker starts none that
			// leave it), its environment gone with it.
			tag = r.adopted
		}
		if tag == "" && p.ppid == r.self && (p.state != 'Z' || r.foreign[key]) {
			// Another's child (another backend's program, say): never
			// taken for an adopted one when it ends.
			foreign[key] = true
		}
		if tag != "" {
			out = append(out, ownedProc{procInfo: p, tag: tag})
		}
		for _, c := range children[p.pid] {
			queue = append(queue, entry{pid: c, tag: tag})
		}
	}
	return out
}

// environTag is the backend's tag in pid's environment, or "".
func (r *reaper) environTag(pid int) string {
	env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return ""
	}
	for kv := range bytes.SplitSeq(env, []byte{0}) {
		if bytes.HasPrefix(kv, []byte(r.prefix)) {
			return string(kv[len(tagEnv)+1:])
		}
	}
	return ""
}

// finish ends every owned process left: it waits until deadline for them
// to end (SIGTERM was sent already), then SIGKILLs them and waits up to
// 10s more; ctx ending sends SIGKILL at once. It reaps them as they end and
// returns an error naming how many are left when some will not go.
func (r *reaper) finish(ctx context.Context, deadline time.Time) error {
	killed := false
	for {
		n := r.sweep(0, "")
		if n == 0 {
			return nil
		}
		now := time.Now()
		if !killed && (now.After(deadline) || ctx.Err() != nil) {
			r.log.Warn("processes the programs left behind did not exit after SIGTERM; sending SIGKILL", "count", n)
			r.sweep(unix.SIGKILL, "")
			killed, deadline = true, now.Add(10*time.Second)
			continue
		}
		if killed && now.After(deadline) {
			return fmt.Errorf("exec: %d process(es) the programs started still running 10s after SIGKILL", n)
		}
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
}

// readProcs reads every process's stat.
func readProcs() (map[int]procInfo, error) {
	d, err := os.Open("/proc")
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	out := make(map[int]procInfo, len(names))
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		if p, err := readProc(pid); err == nil {
			out[pid] = p
		}
	}
	return out, nil
}

var errBadStat = errors.New("exec: unparsable /proc stat")

// readProc parses /proc/pid/stat: state, ppid, pgrp, session and start
// time.
func readProc(pid int) (procInfo, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procInfo{}, err
	}
	// The command name is in parentheses and may hold anything: the fields
	// start after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procInfo{}, errBadStat
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 || len(f[0]) != 1 {
		return procInfo{}, errBadStat
	}
	ppid, err1 := strconv.Atoi(f[1])
	pgrp, err2 := strconv.Atoi(f[2])
	sid, err3 := strconv.Atoi(f[3])
	start, err4 := strconv.ParseUint(f[19], 10, 64)
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return procInfo{}, fmt.Errorf("%w: %v", errBadStat, err)
	}
	return procInfo{pid: pid, ppid: ppid, pgrp: pgrp, sid: sid, state: f[0][0], start: start}, nil
}
