package dashboard

import (
	"embed"
	"encoding/json"
	"io/fs"
	"math"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
)

//go:embed static
var static embed.FS

// contentSecurityPolicy allows the page to load only its own script, style
// and data, from its own origin: no inline script or style, no other
// origin, no framing, no forms.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Overview is the JSON of /api/overview: everything the page shows except
// the throughput history.
type Overview struct {
	// NowUnixMs is when this answer was made (the dashboard's clock).
	NowUnixMs int64 `json:"now_unix_ms"`
	// Replica is this replica's local view of the replica set.
	Replica ReplicaView `json:"replica"`
	// Read says where the run and worker data came from.
	Read ReadView `json:"read"`
	// Runs are sorted by name; Workers by id.
	Runs    []RunView    `json:"runs"`
	Workers []WorkerView `json:"workers"`
	// Tenants are the runs' tenants and the ledger's tenant records,
	// sorted by name; TenantsError says why the records (weights, quotas,
	// usage) are missing when they could not be read.
	Tenants      []TenantView `json:"tenants"`
	TenantsError string       `json:"tenants_error,omitempty"`
	// Terms is the term history, oldest first.
	Terms []TermChange `json:"terms"`
	// Events are the recent ledger events, newest first; EventsError says
	// why there are none when they cannot be read.
	Events      []EventView `json:"events"`
	EventsError string      `json:"events_error,omitempty"`
	// ClusterName is the cluster's --cluster-name ("" without one);
	// Federation its peer clusters as the leader last polled them (empty
	// without --peers): read from this replica's view, or, on a follower,
	// from the leader's when the members are asked.
	ClusterName string            `json:"cluster_name,omitempty"`
	Federation  []PeerClusterView `json:"federation"`
}

// PeerClusterView is one federation peer (another cluster runs are handed
// to), as the leader last polled it (rolloutv1.PeerStatus).
type PeerClusterView struct {
	Name        string   `json:"name"`
	Reachable   bool     `json:"reachable"`
	LeaderID    string   `json:"leader_id"`
	Term        uint64   `json:"term"`
	Models      []string `json:"models"`
	AllModels   bool     `json:"all_models"`
	Stores      []string `json:"stores"`
	ClockSkewMs int64    `json:"clock_skew_ms"`
	LastError   string   `json:"last_error,omitempty"`
	// LastPollUnixMs is when the last poll succeeded (0: never).
	LastPollUnixMs int64 `json:"last_poll_unix_ms"`
	// CertNotAfterUnixMs is when the peer certificate this cluster
	// presents to it expires (0: unknown); CertExpiring within a tenth of
	// its life.
	CertNotAfterUnixMs int64 `json:"cert_not_after_unix_ms"`
	CertExpiring       bool  `json:"cert_expiring"`
	// Handles counts the runs handed to it; Active those not ended.
	Handles uint32 `json:"handles"`
	Active  uint32 `json:"active"`
}

// ReplicaView is the replica that serves the dashboard, as it sees itself.
type ReplicaView struct {
	ID           string       `json:"id"`
	State        string       `json:"state"`
	Term         uint64       `json:"term"`
	LeaderID     string       `json:"leader_id"`
	LeaderAddr   string       `json:"leader_addr"`
	CommitIndex  uint64       `json:"commit_index"`
	AppliedIndex uint64       `json:"applied_index"`
	LedgerEpoch  uint64       `json:"ledger_epoch"`
	Insecure     bool         `json:"insecure"`
	Members      []MemberView `json:"members"`
	// ExpiringCerts are the certificates within a tenth of their life of
	// expiring (or past it): this replica's own, and those of its live
	// connections.
	ExpiringCerts []CertView `json:"expiring_certs"`
	// Error is set when the local view could not be read.
	Error string `json:"error,omitempty"`
}

// CertView is a certificate about to expire.
type CertView struct {
	Name           string `json:"name"`
	Role           string `json:"role"`
	Serial         string `json:"serial"`
	NotAfterUnixMs int64  `json:"not_after_unix_ms"`
	Own            bool   `json:"own"`
}

// MemberView is one member of the replica set: its place in this
// replica's configuration, and, when Config.Peer is set, what it reports
// itself (Reachable, State, Term, AppliedIndex) or why it could not be
// asked (Error).
type MemberView struct {
	ID           string `json:"id"`
	RaftAddr     string `json:"raft_addr"`
	GRPCAddr     string `json:"grpc_addr"`
	Leader       bool   `json:"leader"`
	Suffrage     string `json:"suffrage"`
	Self         bool   `json:"self"`
	Reachable    bool   `json:"reachable"`
	State        string `json:"state"`
	Term         uint64 `json:"term"`
	AppliedIndex uint64 `json:"applied_index"`
	Error        string `json:"error,omitempty"`
}

// ReadView describes the linearizable read the run data comes from.
type ReadView struct {
	// OK is false when the last read failed (Error says why); the data
	// shown is then the last that was read (AtUnixMs), or none.
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	// ServedBy is the replica that answered; Term and Leader those of the
	// reply.
	ServedBy string `json:"served_by"`
	Term     uint64 `json:"term"`
	Leader   string `json:"leader"`
	AtUnixMs int64  `json:"at_unix_ms"`
	// LedgerNowUnixMs is the leader's clock at the read.
	LedgerNowUnixMs int64 `json:"ledger_now_unix_ms"`
}

// StallView is why a run is stalled: the input object its workers could
// not read, what was wrong, and the leader-stamped time the stall began.
type StallView struct {
	Object      string `json:"object"`
	Reason      string `json:"reason"`
	SinceUnixMs int64  `json:"since_unix_ms"`
	// StoreUnreachable: the run is isolated because its store cannot be
	// reached (Reason is the last error), not stalled on a missing object.
	StoreUnreachable bool `json:"store_unreachable,omitempty"`
}

// RunView is one run's progress.
type RunView struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
	// Tenant owns the run; Priority is its priority (1 to 5; 0 from a
	// ledger of before priorities); Share its part of every Running item
	// of the cluster now (0 to 1).
	Tenant      string  `json:"tenant"`
	Priority    uint32  `json:"priority"`
	Share       float64 `json:"share"`
	Total       uint64  `json:"total"`
	Pending     uint64  `json:"pending"`
	Blocked     uint64  `json:"blocked"`
	Running     uint64  `json:"running"`
	RunningLong uint64  `json:"running_long"`
	OwnerLost   uint64  `json:"owner_lost"`
	Done        uint64  `json:"done"`
	Dead        uint64  `json:"dead"`
	Failures    uint64  `json:"failures"`
	Finished    bool    `json:"finished"`
	// Cancelled tells a cancelled run; CancelledItems counts its items
	// that will not run.
	Cancelled      bool   `json:"cancelled"`
	CancelledItems uint64 `json:"cancelled_items"`
	// Model is the run's model (RunSpec.model; empty: none). UnservedModel
	// is set while the run is not finished and no live worker of its kind
	// serves that model: its items wait and the run stays active
	// (RunCounters.unserved_model).
	Model         string `json:"model,omitempty"`
	UnservedModel bool   `json:"unserved_model"`
	// Stall is set while the run is stalled on a missing or changed input
	// object (RunCounters.stall): its items wait until the object is back.
	Stall *StallView `json:"stall,omitempty"`
	// RatePerSec is items finished per second over the rate window;
	// ETASeconds the time left at that rate (-1: unknown).
	RatePerSec     float64 `json:"rate_per_sec"`
	ETASeconds     float64 `json:"eta_seconds"`
	CreatedUnixMs  int64   `json:"created_unix_ms"`
	FinishedUnixMs int64   `json:"finished_unix_ms"`
	// Loss is the per-step loss of a training run (kind "train"), when the
	// dashboard has a LossReader.
	Loss []LossPoint `json:"loss,omitempty"`
	// Cluster is where the run runs: "local", or the peer cluster it was
	// handed to (federation), whose run RemoteRun is; HandleState and
	// HandleReason are the handle's state (pending, acknowledged,
	// finished, cancelled, lost, refused) and why.
	Cluster      string `json:"cluster"`
	RemoteRun    string `json:"remote_run,omitempty"`
	HandleState  string `json:"handle_state,omitempty"`
	HandleReason string `json:"handle_reason,omitempty"`
}

// WorkerView is one worker's row of the grid.
type WorkerView struct {
	ID          string  `json:"id"`
	Running     uint64  `json:"running"`
	OnTime      uint64  `json:"on_time"`
	RunningLong uint64  `json:"running_long"`
	OwnerLost   uint64  `json:"owner_lost"`
	Backlog     uint32  `json:"backlog"`
	ItemsPerSec float64 `json:"items_per_sec"`
	Completed   uint64  `json:"completed"`
	// LastHeartbeatUnixMs and HeartbeatAgeMs (at the read, by the leader's
	// clock; -1 when never).
	LastHeartbeatUnixMs int64 `json:"last_heartbeat_unix_ms"`
	HeartbeatAgeMs      int64 `json:"heartbeat_age_ms"`
	Lost                bool  `json:"lost"`
	// Models are the models it serves as registered; empty: every model.
	Models []string `json:"models,omitempty"`
}

// EventView is one ledger event.
type EventView struct {
	Seq    uint64 `json:"seq"`
	UnixMs int64  `json:"unix_ms"`
	Term   uint64 `json:"term"`
	Kind   string `json:"kind"`
	Run    string `json:"run,omitempty"`
	Worker string `json:"worker,omitempty"`
	Member string `json:"member,omitempty"`
	Detail string `json:"detail,omitempty"`
	Count  uint64 `json:"count,omitempty"`
}

// Throughput is the JSON of /api/throughput.
type Throughput struct {
	IntervalMs int64   `json:"interval_ms"`
	Points     []Point `json:"points"`
}

// Handler returns the dashboard's HTTP handler: the page and its assets,
// /api/overview and /api/throughput[?since=UNIX_MS]. plainHTTP must be true
// when it is served without TLS (then only requests for an IP address or
// localhost are answered).
func (d *Dashboard) Handler(plainHTTP bool) http.Handler {
	mux := http.NewServeMux()
	sub, _ := fs.Sub(static, "static")
	files := http.FileServerFS(sub)
	mux.Handle("/static/", http.StripPrefix("/static/", files))
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, r *http.Request) {
		r2 := r.Clone(r.Context())
		r2.URL.Path = "/index.html"
		serveIndex(w, r2)
	})
	mux.HandleFunc("/api/overview", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, d.Overview(time.Now()))
	})
	mux.HandleFunc("/api/throughput", func(w http.ResponseWriter, r *http.Request) {
		var since int64
		if s := r.URL.Query().Get("since"); s != "" {
			v, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				http.Error(w, "since must be a time in unix milliseconds, got "+strconv.Quote(s), http.StatusBadRequest)
				return
			}
			since = v
		}
		writeJSON(w, d.Throughput(since))
	})
	return guard(mux, plainHTTP)
}

// serveIndex serves the page itself.
func serveIndex(w http.ResponseWriter, r *http.Request) {
	b, err := static.ReadFile("static/index.html")
	if err != nil {
		http.Error(w, "page missing", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(b)
}

// guard applies the rules every response follows: GET and HEAD only,
// security headers, and on plain HTTP a Host that is an IP address or
// localhost.
func guard(next http.Handler, plainHTTP bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			http.Error(w, "the dashboard is read-only: only GET and HEAD are allowed", http.StatusMethodNotAllowed)
			return
		}
		if plainHTTP && !localHost(r.Host) {
			http.Error(w, "plain-HTTP dashboard: the Host must be an IP address or localhost, got "+strconv.Quote(r.Host), http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// localHost reports whether host (a Host header, with or without a port)
// is an IP literal or localhost.
func localHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	return net.ParseIP(host) != nil || strings.EqualFold(host, "localhost")
}

func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "encoding: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(b)
}

// Throughput returns the samples taken after since (unix ms; 0: all kept).
func (d *Dashboard) Throughput(since int64) Throughput {
	d.mu.Lock()
	defer d.mu.Unlock()
	i := sort.Search(len(d.history), func(i int) bool { return d.history[i].UnixMs > since })
	return Throughput{IntervalMs: d.cfg.Interval.Milliseconds(), Points: append([]Point{}, d.history[i:]...)}
}

// Overview returns what the page shows, as of the last sample.
func (d *Dashboard) Overview(now time.Time) Overview {
	d.mu.Lock()
	defer d.mu.Unlock()
	o := Overview{NowUnixMs: now.UnixMilli(), Runs: []RunView{}, Workers: []WorkerView{}, Terms: []TermChange{}, Events: []EventView{}, Tenants: []TenantView{}}
	o.Replica = replicaView(d.local, d.peers, d.peerErr, d.cfg.Peer != nil)
	o.Replica.Error = d.localErr
	o.Read = ReadView{OK: d.status != nil && d.readErr == "", Error: d.readErr}
	if d.status == nil && d.readErr == "" {
		o.Read.Error = "no read yet"
	}
	if st := d.status; st != nil {
		h := st.GetHeader()
		o.Read.ServedBy, o.Read.Term, o.Read.Leader = h.GetReplicaId(), h.GetTerm(), leaderOf(h)
		o.Read.AtUnixMs, o.Read.LedgerNowUnixMs = d.statusAt.UnixMilli(), st.GetNowUnixMs()
		for _, rc := range st.GetRuns() {
			o.Runs = append(o.Runs, d.runView(rc))
		}
		for _, ws := range st.GetWorkers() {
			o.Workers = append(o.Workers, workerView(ws, st.GetNowUnixMs()))
		}
	}
	sort.Slice(o.Runs, func(i, j int) bool { return o.Runs[i].Name < o.Runs[j].Name })
	if d.status != nil {
		o.Tenants = tenantViews(o.Runs, d.tenants.GetTenants())
	}
	o.TenantsError = d.tenantsErr
	sort.Slice(o.Workers, func(i, j int) bool { return o.Workers[i].ID < o.Workers[j].ID })
	for _, t := range d.terms {
		o.Terms = append(o.Terms, t)
	}
	sort.Slice(o.Terms, func(i, j int) bool { return o.Terms[i].Term < o.Terms[j].Term })
	for i := len(d.events) - 1; i >= 0; i-- {
		o.Events = append(o.Events, eventView(d.events[i]))
	}
	o.EventsError = d.eventsState
	o.ClusterName, o.Federation = federationView(d.local, d.peers)
	return o
}

// federationView is the cluster's name and its federation peers: from
// local when it lists peers (the leader fills them), else from the view
// of a member that is the leader; no peers when none does.
func federationView(local *rolloutv1.ClusterResponse, members map[string]*rolloutv1.ClusterResponse) (string, []PeerClusterView) {
	out := []PeerClusterView{}
	src := local
	if len(local.GetPeers()) == 0 {
		ids := make([]string, 0, len(members))
		for id := range members {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		for _, id := range ids {
			if m := members[id]; m.GetState() == rolloutv1.ReplicaState_REPLICA_STATE_LEADER && len(m.GetPeers()) > 0 {
				src = m
				break
			}
		}
	}
	for _, p := range src.GetPeers() {
		out = append(out, PeerClusterView{Name: p.GetName(), Reachable: p.GetReachable(), LeaderID: p.GetLeaderId(), Term: p.GetTerm(),
			Models: p.GetModels(), AllModels: p.GetAllModels(), Stores: p.GetStores(), ClockSkewMs: p.GetClockSkewMs(),
			LastError: p.GetLastError(), LastPollUnixMs: p.GetLastPollUnixMs(),
			CertNotAfterUnixMs: p.GetCertificate().GetNotAfterUnixNano() / 1e6, CertExpiring: p.GetCertificate().GetExpiring(),
			Handles: p.GetHandles(), Active: p.GetActive()})
	}
	name := local.GetClusterName()
	if name == "" {
		name = src.GetClusterName()
	}
	return name, out
}

func certView(c *rolloutv1.CertificateInfo, own bool) CertView {
	return CertView{Name: c.GetName(), Role: c.GetRole(), Serial: c.GetSerial(), NotAfterUnixMs: c.GetNotAfterUnixNano() / 1e6, Own: own}
}

func replicaView(c *rolloutv1.ClusterResponse, peers map[string]*rolloutv1.ClusterResponse, peerErr map[string]string, asked bool) ReplicaView {
	v := ReplicaView{Members: []MemberView{}, ExpiringCerts: []CertView{}}
	if c == nil {
		return v
	}
	if own := c.GetCertificate(); own.GetExpiring() {
		v.ExpiringCerts = append(v.ExpiringCerts, certView(own, true))
	}
	for _, p := range c.GetExpiringPeers() {
		v.ExpiringCerts = append(v.ExpiringCerts, certView(p, false))
	}
	h := c.GetHeader()
	v.ID, v.Term, v.LeaderID, v.LeaderAddr = h.GetReplicaId(), h.GetTerm(), h.GetLeaderId(), h.GetLeaderAddr()
	v.State = stateName(c.GetState())
	v.CommitIndex, v.AppliedIndex, v.LedgerEpoch, v.Insecure = c.GetCommitIndex(), c.GetAppliedIndex(), c.GetLedgerEpoch(), c.GetInsecure()
	for _, m := range c.GetMembers() {
		mv := MemberView{ID: m.GetId(), RaftAddr: m.GetRaftAddr(), GRPCAddr: m.GetGrpcAddr(), Leader: m.GetLeader(),
			Suffrage: strings.ToLower(strings.TrimPrefix(m.GetSuffrage().String(), "SUFFRAGE_")), Self: m.GetId() == v.ID}
		own := peers[mv.ID]
		if mv.Self {
			own = c
		}
		switch {
		case own != nil:
			mv.Reachable, mv.State, mv.Term, mv.AppliedIndex = true, stateName(own.GetState()), own.GetHeader().GetTerm(), own.GetAppliedIndex()
		case asked:
			mv.Error = peerErr[mv.ID]
		}
		v.Members = append(v.Members, mv)
	}
	sort.Slice(v.Members, func(i, j int) bool { return v.Members[i].ID < v.Members[j].ID })
	return v
}

// runView is one run's row. Called with mu held.
func (d *Dashboard) runView(rc *rolloutv1.RunCounters) RunView {
	v := RunView{
		Name: rc.GetName(), Kind: rc.GetKind(), Tenant: rc.GetTenant(), Priority: rc.GetPriority(), Share: rc.GetShare(),
		Total: rc.Target(), Pending: rc.GetPending(), Blocked: rc.GetBlocked(),
		Running: rc.GetRunning(), RunningLong: rc.GetRunningLong(), OwnerLost: rc.GetOwnerLost(),
		Done: rc.GetDone(), Dead: rc.GetDead(), Failures: rc.GetFailures(), Finished: rc.Finished(),
		Cancelled: rc.GetCancelled(), CancelledItems: rc.GetCancelledItems(),
		Model: rc.GetModel(), UnservedModel: rc.GetUnservedModel(),
		CreatedUnixMs: rc.GetCreatedUnixMs(), FinishedUnixMs: rc.GetFinishedUnixMs(), ETASeconds: -1,
		Loss:    d.loss[rc.GetName()],
		Cluster: rc.GetCluster(), RemoteRun: rc.GetRemoteRun(), HandleState: rc.GetHandleState(), HandleReason: rc.GetHandleReason(),
	}
	if v.Cluster == "" {
		v.Cluster = "local"
	}
	if v.Kind == "" {
		v.Kind = "batch"
	}
	if s := rc.GetStall(); s != nil {
		v.Stall = &StallView{Object: s.GetObject(), Reason: s.GetReason(), SinceUnixMs: s.GetSinceUnixMs(),
			StoreUnreachable: s.GetStoreUnreachable()}
	}
	if v.Finished {
		v.ETASeconds = 0
		return v
	}
	v.RatePerSec = d.rate(rc.GetName())
	if left := float64(v.Total) - float64(v.Done+v.Dead); v.RatePerSec > 0 && left >= 0 {
		v.ETASeconds = math.Round(left/v.RatePerSec*10) / 10
	}
	return v
}

func stateName(s rolloutv1.ReplicaState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "REPLICA_STATE_"))
}

func workerView(ws *rolloutv1.WorkerStatus, nowMs int64) WorkerView {
	v := WorkerView{
		ID: ws.GetId(), Running: ws.GetRunning(), RunningLong: ws.GetRunningLong(), OwnerLost: ws.GetOwnerLost(),
		Backlog: ws.GetBacklog(), ItemsPerSec: ws.GetItemsPerSec(), Completed: ws.GetCompleted(),
		LastHeartbeatUnixMs: ws.GetLastHeartbeatUnixMs(), HeartbeatAgeMs: -1, Lost: ws.GetLost(),
		Models: ws.GetModels(),
	}
	v.OnTime = v.Running - min(v.Running, v.RunningLong+v.OwnerLost)
	if hb := v.LastHeartbeatUnixMs; hb > 0 && nowMs > 0 {
		v.HeartbeatAgeMs = max(0, nowMs-hb)
	}
	return v
}

func eventView(e *rolloutv1.Event) EventView {
	return EventView{
		Seq: e.GetSeq(), UnixMs: e.GetUnixMs(), Term: e.GetTerm(),
		Kind: strings.ToLower(strings.TrimPrefix(e.GetKind().String(), "EVENT_KIND_")),
		Run:  e.GetRun(), Worker: e.GetWorker(), Member: e.GetMember(), Detail: e.GetDetail(), Count: e.GetCount(),
	}
}
