package audit

import "fmt"

// Problem kinds reported by the verifier.
const (
	ProblemEdited   = "edited"   // the row's content no longer matches its hash
	ProblemDeleted  = "deleted"  // rows are missing before this one (or at the end)
	ProblemRelinked = "relinked" // the row's prev_hash does not name the row before it
)

// Problem is one finding of Verify, naming the row it concerns.
type Problem struct {
	Seq     int64  `json:"seq"`
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

// Report is the outcome of verifying a chain.
type Report struct {
	OK       bool      `json:"ok"`
	Checked  int64     `json:"checked"`
	HeadSeq  int64     `json:"head_seq"`
	Problems []Problem `json:"problems"`
}

// Verifier checks events one at a time, in sequence order, so that a log of
// any length is verified in constant memory.
type Verifier struct {
	prevSeq  int64
	prevHash string
	report   Report
}

// Add checks the next event read from the log.
func (v *Verifier) Add(e Event) {
	v.report.Checked++
	expectPrev := v.prevHash
	if v.prevSeq == 0 {
		expectPrev = GenesisHash
	}
	if e.Seq != v.prevSeq+1 {
		v.problem(e.Seq, ProblemDeleted, fmt.Sprintf("rows %d..%d are missing before row %d", v.prevSeq+1, e.Seq-1, e.Seq))
	} else if e.PrevHash != expectPrev {
		v.problem(e.Seq, ProblemRelinked, fmt.Sprintf("row %d does not chain to row %d: prev_hash differs", e.Seq, v.prevSeq))
	}
	if ComputeHash(e) != e.Hash {
		v.problem(e.Seq, ProblemEdited, fmt.Sprintf("row %d (%s %s) was changed after it was written: its hash does not match its content", e.Seq, e.Action, e.Object))
	}
	v.prevSeq, v.prevHash = e.Seq, e.Hash
}

// Finish compares the last event seen with the recorded head and returns the
// report.
func (v *Verifier) Finish(head Head) Report {
	v.report.HeadSeq = head.Seq
	switch {
	case head.Seq > v.prevSeq:
		v.problem(v.prevSeq+1, ProblemDeleted, fmt.Sprintf("rows %d..%d are missing at the end of the log", v.prevSeq+1, head.Seq))
	case head.Seq == v.prevSeq && head.Hash != v.prevHash && head.Seq > 0:
		v.problem(head.Seq, ProblemEdited, fmt.Sprintf("row %d is not the row the chain head recorded", head.Seq))
	case head.Seq < v.prevSeq:
		v.problem(head.Seq+1, ProblemEdited, fmt.Sprintf("rows after %d were added outside the keeper", head.Seq))
	}
	v.report.OK = len(v.report.Problems) == 0
	if v.report.Problems == nil {
		v.report.Problems = []Problem{}
	}
	return v.report
}

func (v *Verifier) problem(seq int64, kind, msg string) {
	v.report.Problems = append(v.report.Problems, Problem{Seq: seq, Kind: kind, Message: msg})
}
