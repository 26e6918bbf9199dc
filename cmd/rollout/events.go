package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
)

// eventsReader is what `rollout events` needs of a connection
// (coordclient.Client has it).
type eventsReader interface {
	Events(ctx context.Context, req *rolloutv1.EventsRequest) (*rolloutv1.EventsResponse, error)
}

// Paging of `rollout events`.
const (
	eventsPage = 500
	// eventsWait is each long-poll of --follow (the coordinator caps it at
	// its own maximum).
	eventsWait = 10 * time.Second
)

func (a *app) eventsCmd() *cobra.Command {
	var coords []string
	var run string
	var after uint64
	var follow, asJSON bool
	cmd := &cobra.Command{
		Use:   "events --coord H:P[,...] [--follow] [--run NAME] [--after SEQ] [--json]",
		Short: "Show the cluster's event history (leader changes, members, workers, steals, drains, runs); --follow waits for new ones",
		Long: "events prints the ledger's bounded event history, oldest first: leaders elected, members joined\n" +
			"and removed, workers registered, deregistered (with their drain reason), evicted, expired and\n" +
			"removed, items stolen, runs created and finished, items gone dead. --after SEQ shows only the\n" +
			"events after that seq, --run NAME only that run's. With --follow it keeps waiting for new events\n" +
			"(across leader changes) and prints them as they come, until interrupted. --json prints one JSON\n" +
			"object per event. When the history no longer holds events you asked for (it keeps the newest),\n" +
			"a note on stderr says which were dropped.",
		Args: cobra.NoArgs,
	}
	addCoordFlag(cmd, &coords)
	cmd.Flags().StringVar(&run, "run", "", "show only the events of this run")
	cmd.Flags().Uint64Var(&after, "after", 0, "show only the events after this seq")
	cmd.Flags().BoolVar(&follow, "follow", false, "keep waiting for new events and print them until interrupted")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object per event (JSON Lines)")
	cmd.RunE = a.action(func(ctx context.Context, cmd *cobra.Command) error {
		if cmd.Flags().Changed("run") {
			if err := checkRunName(run); err != nil {
				return err
			}
		}
		c, err := a.client(coords)
		if err != nil {
			return err
		}
		defer c.Close()
		ev, ok := c.(eventsReader)
		if !ok {
			return fmt.Errorf("events: this connection (%T) cannot read events", c)
		}
		p := &eventPrinter{w: a.stdout, warn: a.stderr, json: asJSON}
		err = a.events(ctx, ev, p, run, after, follow)
		if follow && errors.Is(err, context.Canceled) && ctx.Err() != nil {
			return nil // interrupted: the normal end of --follow
		}
		return err
	})
	return cmd
}

// events pages through the history after after (of run, when set) and
// prints it; with follow it then long-polls for new events until ctx ends.
// In follow mode a cluster that does not answer within --timeout (no
// leader for that long) is reported on stderr and asked again.
func (a *app) events(ctx context.Context, ev eventsReader, p *eventPrinter, run string, after uint64, follow bool) error {
	caughtUp := false
	for {
		req := &rolloutv1.EventsRequest{AfterSeq: after, Limit: eventsPage, Run: run}
		if caughtUp {
			req.WaitMs = uint32(eventsWait / time.Millisecond)
		}
		cctx, cancel := context.WithTimeout(ctx, a.timeout+time.Duration(req.WaitMs)*time.Millisecond)
		resp, err := ev.Events(cctx, req)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if follow && retryableFollow(err) {
				fmt.Fprintf(a.stderr, "rollout: events: %v; asking again\n", err)
				continue
			}
			return a.rpcError("reading events", a.timeout, err)
		}
		if first := resp.GetFirstSeq(); first > after+1 {
			p.dropped(after, first)
		}
		evs := resp.GetEvents()
		if err := p.print(evs); err != nil {
			return err
		}
		if n := len(evs); n > 0 {
			after = max(after, evs[n-1].GetSeq())
		}
		if len(evs) < eventsPage {
			// The reply covers the history up to last_seq (the run filter
			// skipped the rest).
			after = max(after, resp.GetLastSeq())
			caughtUp = true
			if !follow {
				if !p.printed {
					p.none()
				}
				return nil
			}
		}
	}
}

// retryableFollow reports an error --follow outlasts: no leader (or no
// answer) within --timeout.
func retryableFollow(err error) bool {
	if finalTLSCause(err) != "" {
		return false // an impostor, a revoked certificate: asking again cannot help
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return errors.Is(err, context.DeadlineExceeded)
}

// eventPrinter writes events as a table (a header once, fixed-width
// columns, so that rows printed later by --follow line up) or as JSON
// Lines.
type eventPrinter struct {
	w, warn io.Writer
	json    bool
	header  bool
	printed bool
}

func (p *eventPrinter) print(evs []*rolloutv1.Event) error {
	for _, e := range evs {
		if p.json {
			b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(e)
			if err != nil {
				return err
			}
			fmt.Fprintf(p.w, "%s\n", b)
		} else {
			if !p.header {
				fmt.Fprintf(p.w, eventRowFormat, "SEQ", "TIME (UTC)", "TERM", "KIND", "SUBJECT", "DETAIL")
				p.header = true
			}
			fmt.Fprintf(p.w, eventRowFormat, fmt.Sprint(e.GetSeq()), eventTime(e), fmt.Sprint(e.GetTerm()),
				eventKindName(e.GetKind()), eventSubject(e), eventDetail(e))
		}
		p.printed = true
	}
	return nil
}

// none says that there is nothing to show (table mode only: JSON Lines
// stay empty).
func (p *eventPrinter) none() {
	if !p.json {
		fmt.Fprintln(p.w, "no events")
	}
}

// dropped notes on stderr that the bounded history no longer holds the
// events after `after` up to first-1.
func (p *eventPrinter) dropped(after, first uint64) {
	fmt.Fprintf(p.warn, "rollout: events %d to %d were dropped from the cluster's bounded event history (it keeps the newest); showing from %d\n",
		after+1, first-1, first)
}

const eventRowFormat = "%-7s %-23s %-5s %-20s %-22s %s\n"

func eventTime(e *rolloutv1.Event) string {
	if e.GetUnixMs() == 0 {
		return "-"
	}
	return time.UnixMilli(e.GetUnixMs()).UTC().Format("2006-01-02 15:04:05.000")
}

// eventKindName is an event kind as the CLI shows it: "leader-elected" for
// EVENT_KIND_LEADER_ELECTED.
func eventKindName(k rolloutv1.EventKind) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(k.String(), "EVENT_KIND_")), "_", "-")
}

// eventSubject names what the event is about: its run, worker and member.
func eventSubject(e *rolloutv1.Event) string {
	var f []string
	if e.GetRun() != "" {
		f = append(f, "run "+e.GetRun())
	}
	if e.GetWorker() != "" {
		f = append(f, "worker "+e.GetWorker())
	}
	if e.GetMember() != "" {
		f = append(f, "member "+e.GetMember())
	}
	if len(f) == 0 {
		return "-"
	}
	return strings.Join(f, ", ")
}

// eventDetail words the detail and count of an event by its kind.
func eventDetail(e *rolloutv1.Event) string {
	d, n := e.GetDetail(), e.GetCount()
	join := func(parts ...string) string {
		var f []string
		for _, p := range parts {
			if p != "" {
				f = append(f, p)
			}
		}
		if len(f) == 0 {
			return "-"
		}
		return strings.Join(f, "; ")
	}
	items := func(n uint64) string {
		if n == 1 {
			return "1 item"
		}
		return fmt.Sprintf("%d items", n)
	}
	switch e.GetKind() {
	case rolloutv1.EventKind_EVENT_KIND_ITEMS_STOLEN:
		return fmt.Sprintf("stole %s from %s", items(n), orDash(d))
	case rolloutv1.EventKind_EVENT_KIND_WORKER_DEREGISTERED, rolloutv1.EventKind_EVENT_KIND_WORKER_EVICTED,
		rolloutv1.EventKind_EVENT_KIND_WORKER_EXPIRED:
		return join(d, items(n)+" re-pended")
	case rolloutv1.EventKind_EVENT_KIND_ITEM_DEAD:
		return join(items(n)+" dead", d)
	case rolloutv1.EventKind_EVENT_KIND_RUN_FINISHED:
		return join(items(n), d)
	case rolloutv1.EventKind_EVENT_KIND_CONNS_REFUSED:
		// The detail names the listener, the reasons and the top source.
		return join(d)
	case rolloutv1.EventKind_EVENT_KIND_RUN_STALLED:
		// The detail names the input object and the reason.
		return join(d, items(n)+" waiting")
	case rolloutv1.EventKind_EVENT_KIND_RUN_RESUMED:
		return join(d, items(n)+" back in the queue")
	}
	if n > 0 {
		return join(d, fmt.Sprintf("count %d", n))
	}
	return join(d)
}
