//go:build !linux

package versitygw

import "errors"

// errNoProc: telling which process holds a port needs /proc.
var errNoProc = errors.New("telling which process listens on a port needs Linux's /proc")

// Listening cannot tell which process holds a port here (no /proc): the
// servers run on Linux only, so a caller refuses rather than trusting a dial.
func Listening(pid, port int) (bool, error) { return false, errNoProc }

// PortHeld cannot tell here; it says false.
func PortHeld(port int) bool { return false }
