package server

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/fsm"
	"github.com/rollout/rollout/fsm/fsmpb"
)

// replyHeadroom is what a Claim, Steal or OwnedItems reply holds besides
// its items (header, victim, field tags): the items may take the message
// limit less this.
const replyHeadroom = 64 << 10

// giveBackTimeout bounds the proposal that gives back items that did not fit
// in a reply.
const giveBackTimeout = 10 * time.Second

// itemsBudget is the room for items in one reply.
func (s *Server) itemsBudget() int { return s.cfg.Limits.MaxMessageBytes - replyHeadroom }

// deliver converts items the ledger gives a worker into the reply's items:
// each gets its run's model, sampling and kind (RunSpec) and, in
// depends_on order, the ids and results of the items it depends on
// (Item.deps; all Done, or the item would not have been claimable, and
// Done is final). The reply is bounded: deliver keeps items, in order, while
// their encoded size stays within the message limit less replyHeadroom, and
// returns the rest in over (the caller gives them back, see giveBack). An
// item that alone exceeds the budget is returned in tooLarge instead, so a
// reply never exceeds the limit and always holds at least one item when the
// first item fits alone.
func (s *Server) deliver(items []fsm.Item) (out []*rolloutv1.Item, over, tooLarge []fsm.Item) {
	budget := s.itemsBudget()
	used := 0
	specs := map[string]*fsmpb.RunSpec{}
	for i, it := range items {
		spec, ok := specs[it.Run]
		if !ok {
			if r, err := s.ledger.Run(it.Run); err == nil {
				spec = r.Spec
			}
			specs[it.Run] = spec
		}
		pb := toItem(it)
		pb.Model, pb.Sampling, pb.Kind, pb.Store = spec.GetModel(), spec.GetSampling(), spec.GetKind(), spec.GetStore()
		if pb.Store != "" {
			pb.DataPrefix = fsm.RunDataPrefix(it.Run, spec.GetDataPrefix())
		}
		if len(it.DependsOn) > 0 {
			deps, err := s.ledger.Dependencies(it.Run, it.ID)
			if err != nil {
				// Items are never removed from the ledger: this cannot
				// happen to an item it just handed out.
				s.log.Error("dependencies of a handed-out item", "run", it.Run, "error", err)
			}
			pb.Deps = make([]*rolloutv1.Dependency, len(deps))
			for k, d := range deps {
				pb.Deps[k] = &rolloutv1.Dependency{Id: d.ID, Result: d.Result, ResultRef: toRef(d.ResultRef), Summary: d.Summary}
			}
		}
		n := proto.Size(pb) + 8 // the item's tag and length
		switch {
		case n > budget:
			tooLarge = append(tooLarge, it)
		case used+n > budget:
			over = append(over, items[i:]...)
			return out, over, tooLarge
		default:
			used += n
			out = append(out, pb)
		}
	}
	return out, over, tooLarge
}

// giveBack returns items the worker was given but that did not fit in the
// reply: over ones are nacked (back to Pending, attempt unchanged), too
// large ones failed with a reason that says why (they count towards the
// run's max_failures, so such an item ends Dead rather than loop). Errors are
// logged: an item that could not be given back stays the worker's, and its
// next reconciliation (OwnedItems) or the failure scan recovers it.
func (s *Server) giveBack(ctx context.Context, worker string, over, tooLarge []fsm.Item) {
	if len(over)+len(tooLarge) == 0 {
		return
	}
	cmds := make([]*fsmpb.Command, 0, len(over)+len(tooLarge))
	for _, it := range over {
		cmds = append(cmds, &fsmpb.Command{Cmd: &fsmpb.Command_Nack{Nack: &fsmpb.NackCmd{
			Run: it.Run, Id: it.ID, Worker: worker, Attempt: it.Attempt}}})
	}
	for _, it := range tooLarge {
		reason := fmt.Sprintf("the item with its dependencies' results exceeds the reply limit of %d bytes", s.itemsBudget())
		cmds = append(cmds, &fsmpb.Command{Cmd: &fsmpb.Command_Fail{Fail: &fsmpb.FailCmd{
			Run: it.Run, Id: it.ID, Worker: worker, Attempt: it.Attempt, Reason: reason}}})
	}
	// The caller may have gone (the reply it waited for is being dropped):
	// give the items back anyway.
	gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), giveBackTimeout)
	defer cancel()
	results, _, err := s.proposeAll(gctx, cmds)
	if err != nil {
		s.log.Warn("giving back items that did not fit in a reply", "worker", worker, "items", len(cmds), "error", err)
		return
	}
	for i, r := range results {
		if r.Err != nil {
			s.log.Warn("giving back an item that did not fit in a reply", "worker", worker, "command", i, "error", r.Err)
		}
	}
	s.log.Debug("gave back items that did not fit in a reply", "worker", worker, "nacked", len(over), "failed", len(tooLarge))
}
