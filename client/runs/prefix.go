package runs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/store/storeurl"
)

// ErrNoClusterID: the cluster announced no identity within the call's
// timeout (its first leader's epoch entry is not applied yet, or a
// coordinator of a release before cluster identities). Retrying later may
// succeed; nothing was uploaded.
var ErrNoClusterID = errors.New("the cluster has no identity yet")

// clusterIDPoll is how often ClusterID asks again while the cluster
// announces none.
const clusterIDPoll = 200 * time.Millisecond

// ClusterID returns the cluster's identity (ClusterResponse.cluster_id),
// asking again while the answering replica has none yet (a cluster that
// just started) until timeout, then ErrNoClusterID.
func ClusterID(ctx context.Context, c Coordinator, timeout time.Duration) (string, error) {
	timeout = orDefault(timeout, DefaultTimeout)
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		resp, err := c.Cluster(cctx, "")
		if err == nil && resp.GetClusterId() != "" {
			if err := storeurl.CheckID("cluster id", resp.GetClusterId()); err != nil {
				return "", fmt.Errorf("the coordinator announced an unusable cluster id: %w", err)
			}
			return resp.GetClusterId(), nil
		}
		select {
		case <-cctx.Done():
			if err != nil {
				return "", callError("asking the cluster for its identity (nothing was uploaded)", timeout, err)
			}
			return "", fmt.Errorf("%w (asked for %v; a cluster that just started gets one at its first election): nothing was uploaded", ErrNoClusterID, timeout)
		case <-time.After(clusterIDPoll):
		}
	}
}

// NewIncarnation returns a fresh random incarnation for a run's data
// prefix: 128 bits as 32 lowercase hex digits.
func NewIncarnation() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("a random incarnation: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// specDataPrefix is what a submit's RunSpec.data_prefix says for a run
// whose status rc reports (nil: the run does not exist): an existing run's
// own prefix ("" for one recorded without, whose objects are under
// runs/NAME/), else a fresh incarnation's on the cluster clusterID.
func specDataPrefix(run string, rc *rolloutv1.RunCounters, clusterID string) (string, error) {
	if rc != nil {
		if p := rc.GetDataPrefix(); strings.HasPrefix(p, storeurl.ClustersDir) {
			return p, nil
		}
		return "", nil
	}
	inc, err := NewIncarnation()
	if err != nil {
		return "", err
	}
	return storeurl.DataPrefix(clusterID, run, inc), nil
}

// DataPrefix returns the RunSpec.data_prefix a submit to run sends: the
// run's own when the cluster holds it ("" for a run recorded without one),
// else a fresh incarnation on this cluster (waiting up to timeout for the
// cluster's identity). Its objects go under storeurl.RunData(run, prefix).
func DataPrefix(ctx context.Context, c Coordinator, run string, timeout time.Duration) (string, error) {
	timeout = orDefault(timeout, DefaultTimeout)
	_, rc, err := Status(ctx, c, run, timeout)
	switch {
	case errors.Is(err, ErrRunNotFound):
		rc = nil
	case err != nil:
		return "", err
	default:
		return specDataPrefix(run, rc, "")
	}
	id, err := ClusterID(ctx, c, timeout)
	if err != nil {
		return "", err
	}
	return specDataPrefix(run, nil, id)
}
