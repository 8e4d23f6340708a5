package sessions

import "testing"

// TestRunStateEdges: move follows the table of legal transitions — a legal
// edge moves, an illegal one panics in tests — and a final state has no way
// out.
func TestRunStateEdges(t *testing.T) {
	for from := range nStates {
		for to := range nStates {
			lr := &liveRun{id: "r", st: from}
			legal := edges[from]&(1<<to) != 0
			panicked := func() (p bool) {
				defer func() { p = recover() != nil }()
				lr.move(bits(from), to)
				return false
			}()
			switch {
			case legal && (panicked || lr.st != to):
				t.Errorf("%s → %s is legal but did not move", from, to)
			case !legal && !panicked:
				t.Errorf("%s → %s is illegal but did not panic", from, to)
			}
			if from.final() && legal {
				t.Errorf("final state %s has an edge to %s", from, to)
			}
		}
		lr := &liveRun{id: "r", st: from}
		if lr.move(0, stEnded) || lr.st != from {
			t.Errorf("move from a state not in its precondition changed %s", from)
		}
	}
}
