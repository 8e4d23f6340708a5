package sessions

// Stats is a snapshot of the runs this instance holds live, for gauges
// (queue depth, runs by status). Runs held by other instances sharing the
// store are not counted: each instance reports its own, and a dashboard
// sums them.
type Stats struct {
	// Running counts runs executing now.
	Running int
	// Queued counts runs held here waiting for their session's turn (not
	// yet claimed).
	Queued int
	// Parked counts the runs this instance last ran that wait, parked,
	// for tool confirmations (RUNNING in the store, executed by no one),
	// as of its last look at the store (every lease TTL/3). A run parked by
	// an instance that is gone is counted by none.
	Parked int
}

// Stats returns the current counts. It is cheap (one pass over the runs
// held here) and safe to call from a metrics scrape.
func (s *Service) Stats() Stats {
	st := Stats{Parked: int(s.parked.Load())}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, lr := range s.live {
		switch lr.state() {
		case stClaimed, stExecuting, stEnding:
			st.Running++
		case stHeld, stHeldEnding, stHeldStopped:
			st.Queued++
		}
	}
	return st
}
