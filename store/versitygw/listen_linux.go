package versitygw

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Listening reports whether process pid itself holds a socket listening on
// TCP port: one of its open file descriptors is a socket whose inode
// /proc/net/tcp or /proc/net/tcp6 lists in state LISTEN on that port. A
// bare dial cannot tell: whatever holds the port (a dying process's accept
// queue, another program's listener, a dial that connected to itself)
// answers it too.
func Listening(pid, port int) (bool, error) {
	inodes, err := listenInodes(port)
	if err != nil {
		return false, err
	}
	if len(inodes) == 0 {
		return false, nil
	}
	fdDir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	fds, err := os.ReadDir(fdDir)
	if err != nil {
		return false, fmt.Errorf("reading %s: %w", fdDir, err)
	}
	for _, fd := range fds {
		link, err := os.Readlink(filepath.Join(fdDir, fd.Name()))
		if err != nil {
			continue // closed since ReadDir
		}
		inode, ok := strings.CutPrefix(link, "socket:[")
		if ok && inodes[strings.TrimSuffix(inode, "]")] {
			return true, nil
		}
	}
	return false, nil
}

// PortHeld reports whether any process of this network namespace listens
// on TCP port.
func PortHeld(port int) bool {
	inodes, err := listenInodes(port)
	return err == nil && len(inodes) > 0
}

// listenInodes returns the inodes of the sockets listening on TCP port
// (IPv4 or IPv6) in this network namespace.
func listenInodes(port int) (map[string]bool, error) {
	const listen = "0A" // TCP_LISTEN in /proc/net/tcp's st column
	want := fmt.Sprintf(":%04X", port)
	inodes := map[string]bool{}
	for _, name := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(name)
		if err != nil {
			if os.IsNotExist(err) {
				continue // no IPv6
			}
			return nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // the header
		for sc.Scan() {
			// sl local_address rem_address st tx:rx tr:tm retrnsmt uid timeout inode
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || fields[3] != listen || !strings.HasSuffix(fields[1], want) {
				continue
			}
			inodes[fields[9]] = true
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", name, err)
		}
	}
	return inodes, nil
}
