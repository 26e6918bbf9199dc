package localcluster

// RestartWith starts a stopped replica again from its data directory with
// the extra flags given, for example --join ADDR for a replica whose data
// directory was emptied (a replacement disk): it then joins the cluster
// under its old id and catches up from the leader.
func (r *Replica) RestartWith(extra ...string) error { return r.start(extra...) }
