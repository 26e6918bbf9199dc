package fsm

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"

	"github.com/rollout/rollout/fsm/fsmpb"
)

// A cluster's identity and where its runs keep their objects.
//
// Every leader proposes, with its epoch entry, a fresh random cluster id
// (EpochCmd.cluster_id); the first one applied is the ledger's for its
// life, and every later one is ignored. So a new cluster gets one at its
// first election and a ledger written before identities at the first
// election after the upgrade; every replica applies the same first one.
//
// A run's objects live under its spec's data_prefix,
// "clusters/CLUSTER/runs/NAME/INCARNATION/" (the layout of package
// store/storeurl, DataPrefix), fixed when the run is created; a run created
// without one keeps the layout of the runs before identities, "runs/NAME/".

// idHexLen is the length of a cluster id and of an incarnation.
const idHexLen = 32

// checkHexID reports why id is not 32 lowercase hex digits.
func checkHexID(what, id string) error {
	ok := len(id) == idHexLen
	for i := 0; ok && i < len(id); i++ {
		c := id[i]
		ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')
	}
	if !ok {
		return invalidErr("%s %q is not %d lowercase hex digits", what, id, idHexLen)
	}
	return nil
}

// setClusterID makes id the ledger's cluster id when it has none (id ""
// or a ledger with one: nothing changes). Callers checked id.
func (st *state) setClusterID(id string) {
	if st.clusterID == "" && id != "" {
		st.clusterID = id
	}
}

// ClusterID returns the cluster's identity: 32 lowercase hex digits, or ""
// before the first epoch entry that carried one was applied.
func (l *Ledger) ClusterID() string {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.st.clusterID
}

// RunDataPrefix returns the key prefix of run's own objects in its store
// (its spec's data_prefix, or "runs/NAME/" for a run recorded without one)
// and whether the ledger holds the run. It is cheap: one map lookup.
func (l *Ledger) RunDataPrefix(run string) (string, bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	r := l.st.runs[run]
	if r == nil {
		return "", false
	}
	return RunDataPrefix(run, r.spec.GetDataPrefix()), true
}

// RunDataPrefix is the key prefix of the objects of run whose spec records
// dataPrefix: dataPrefix itself, or "runs/NAME/" (NAME escaped as
// storeurl.RunPrefix escapes it) when it is empty.
func RunDataPrefix(run, dataPrefix string) string {
	if dataPrefix != "" {
		return dataPrefix
	}
	return "runs/" + escapeRun(run) + "/"
}

// escapeRun is storeurl.RunPrefix's escaping of a run name: path-escaped, a
// leading '.' as %2E.
func escapeRun(run string) string {
	esc := url.PathEscape(run)
	if strings.HasPrefix(esc, ".") {
		esc = "%2E" + esc[1:]
	}
	return esc
}

// checkDataPrefix checks the data_prefix of a submit's spec for run name:
// for a new run (r nil), empty or "clusters/CLUSTER/runs/NAME/INCARNATION/"
// with this ledger's cluster id, the run's escaped name and a 32-hex-digit
// incarnation, and only with a store; for an existing run, empty or the
// run's own.
func (l *Ledger) checkDataPrefix(what, name string, spec *fsmpb.RunSpec, r *run) error {
	p := spec.GetDataPrefix()
	if p == "" {
		return nil
	}
	if r != nil {
		if p != r.spec.GetDataPrefix() {
			return invalidErr("%s names data_prefix %q for run %q, whose data_prefix is %q (fixed when the run was created)",
				what, p, name, r.spec.GetDataPrefix())
		}
		return nil
	}
	if spec.GetStore() == "" {
		return invalidErr("%s names data_prefix %q for run %q without a store", what, p, name)
	}
	parts := strings.Split(p, "/")
	if spec.GetOrigin() != "" && len(parts) == 3 && parts[0] == "runs" && parts[1] != "" && parts[2] == "" {
		return nil // a handed-off run of the parent's layout before cluster identities: "runs/NAME/"
	}
	if len(parts) != 6 || parts[0] != "clusters" || parts[2] != "runs" || parts[5] != "" {
		return invalidErr("%s data_prefix %q is not clusters/CLUSTER/runs/NAME/INCARNATION/", what, p)
	}
	if spec.GetOrigin() != "" {
		// A run a peer cluster handed here (federation) keeps the parent's
		// prefix: its objects are the parent's, under the parent's id and
		// run name, which this ledger does not know.
		if err := checkHexID(what+" data_prefix cluster", parts[1]); err != nil {
			return err
		}
		if parts[3] == "" {
			return invalidErr("%s data_prefix %q names no run", what, p)
		}
		return checkHexID(what+" data_prefix incarnation", parts[4])
	}
	if l.st.clusterID == "" {
		return invalidErr("%s data_prefix %q names cluster %q, but this cluster has no identity yet", what, p, parts[1])
	}
	if parts[1] != l.st.clusterID {
		return invalidErr("%s data_prefix %q names cluster %q, this cluster is %q", what, p, parts[1], l.st.clusterID)
	}
	if esc := escapeRun(name); parts[3] != esc {
		return invalidErr("%s data_prefix %q names run %q, not run %q (escaped %q)", what, p, parts[3], name, esc)
	}
	if err := checkHexID(what+" data_prefix incarnation", parts[4]); err != nil {
		return err
	}
	return nil
}

// checkEpochClusterID checks an epoch's cluster_id: empty or 32 lowercase
// hex digits.
func checkEpochClusterID(c *fsmpb.EpochCmd) error {
	if id := c.GetClusterId(); id != "" {
		return checkHexID("epoch cluster_id", id)
	}
	return nil
}

// NewClusterID returns a fresh random cluster id: 128 bits as 32
// lowercase hex digits.
func NewClusterID() (string, error) {
	var b [idHexLen / 2]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("a random cluster id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// EpochCommand encodes the epoch entry a new leader proposes: its id and
// gRPC address, and a fresh cluster id (the ledger keeps the first one).
func EpochCommand(leaderID, grpcAddr string) ([]byte, error) {
	id, err := NewClusterID()
	if err != nil {
		return nil, err
	}
	return EncodeCommand(&fsmpb.Command{Cmd: &fsmpb.Command_Epoch{Epoch: &fsmpb.EpochCmd{
		LeaderId: leaderID, LeaderGrpcAddr: grpcAddr, ClusterId: id}}})
}
