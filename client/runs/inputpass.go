package runs

import (
	"context"
	"fmt"
	"os"

	"github.com/rollout/rollout/batch"
)

// DefaultKeepInputBytes is how much input Submit keeps in memory between
// its validation and its submit (SubmitConfig.KeepInputBytes): an input up
// to this size is read once. A larger one is read a second time (from the
// page cache) and only split into lines, its blocks checked against those
// validated (batch.Block.Sum). Keeping more costs memory for little CPU:
// the CLI runs at GOGC 400, so a kept input raises its heap several times
// its size (206 MB kept: 580 MB peak RSS; read twice: about 150 MB, and
// about the same CPU, 1.1 s for 100,000 lines of 2 KiB).
const DefaultKeepInputBytes = 64 << 20

// inputPass is Submit's reading of its input: validate reads every line
// once (batch.CheckBlocks: parsed on every core) and keeps the parsed blocks
// while they fit in keep bytes; each then hands the lines to the submit in
// order, from the kept blocks, or, for an input larger than keep, from a
// second read of the files.
type inputPass struct {
	files []string
	read  batch.Config
	keep  int64
	kept  []*batch.Block // nil when the input did not fit
	// sums are the validated blocks' Sums: a second read must find the
	// same blocks.
	sums []uint32
}

// validate reads the input once and reports on it; the error is only for
// a file that cannot be read or ctx ending.
func (p *inputPass) validate(ctx context.Context) (*batch.InputReport, error) {
	rep := batch.NewInputReport(p.files, p.read)
	var held int64
	keeping := p.keep > 0
	if keeping && p.read.Open == nil {
		// Local files: an input larger than keep is not kept at all (a
		// part of it held for nothing would raise the heap's size for
		// the rest of the submit).
		var size int64
		for _, name := range p.files {
			if fi, err := os.Stat(name); err == nil {
				size += fi.Size()
			}
		}
		keeping = size <= p.keep
	}
	err := batch.CheckBlocks(ctx, p.files, p.read, 0, func(b *batch.Block) error {
		rep.Add(b)
		p.sums = append(p.sums, b.Sum)
		if keeping {
			if held += int64(b.Bytes); held > p.keep {
				keeping, p.kept = false, nil
			} else {
				// CheckBlocks gave only each request's Format: cleared,
				// so that an item submit parses the line for its sample
				// id (see request).
				for k := range b.Records {
					b.Records[k].Request = batch.Request{}
				}
				p.kept = append(p.kept, b)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if !keeping {
		p.kept = nil
	} else if p.kept == nil {
		p.kept = []*batch.Block{} // an input of blank lines only: kept, empty
	}
	return rep, nil
}

// request is rec's parsed request: rec.Request, or, for a valid record
// kept without it, parsed again from rec.Raw.
func request(rec *batch.Record) (batch.Request, error) {
	if rec.Err != nil || rec.Request.Format != 0 {
		return rec.Request, nil
	}
	r, err := batch.ParseRequest(rec.Raw)
	if err != nil {
		return batch.Request{}, fmt.Errorf("input changed since it was validated: %s:%d: %w", rec.File, rec.Line, err)
	}
	return r, nil
}

// each calls fn with every record of the input in index order, stopping at
// fn's first error, which it returns as it is. A kept record's Request is
// empty (see request); so is every record without requests (the input read
// again without parsing: batch.ScanLines). A kept block is let go once its
// records were handed out. An input read again that can no longer be
// read, or whose blocks are not those validated (their Sums), is an error
// saying the input changed since it was validated.
func (p *inputPass) each(ctx context.Context, requests bool, fn func(*batch.Record) error) error {
	var fnErr error
	blocks := 0
	records := func(b *batch.Block) error {
		if p.kept == nil {
			if blocks >= len(p.sums) || b.Sum != p.sums[blocks] {
				where := "at its end"
				if len(b.Records) > 0 {
					where = fmt.Sprintf("from %s:%d on", b.Records[0].File, b.Records[0].Line)
				}
				return fmt.Errorf("the lines %s differ from those validated", where)
			}
			blocks++
		}
		for k := range b.Records {
			if err := fn(&b.Records[k]); err != nil {
				fnErr = err
				return err
			}
		}
		return nil
	}
	if p.kept == nil {
		scan := batch.ScanLines
		if requests {
			scan = batch.ScanBlocks
		}
		err := scan(ctx, p.files, p.read, 0, records)
		if err == nil && blocks != len(p.sums) {
			err = fmt.Errorf("it has %d blocks of lines, %d when validated", blocks, len(p.sums))
		}
		if err != nil && err != fnErr && ctx.Err() == nil {
			return fmt.Errorf("input changed since it was validated: %w", err)
		}
		return err
	}
	kept := p.kept
	p.kept = nil
	for i, b := range kept {
		if err := ctx.Err(); err != nil {
			return err
		}
		kept[i] = nil
		if err := records(b); err != nil {
			return err
		}
	}
	return nil
}
