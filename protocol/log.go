package protocol

import (
	"context"

	"github.com/reinhq/rein"
)

// ReadEvents reads one session's log after a cursor, at most limit events,
// and says the log's last seq (sessions.Service.ReadEvents bound to the
// session).
type ReadEvents func(ctx context.Context, after int64, limit int) ([]rein.Event, int64, error)

// runStartPage is how many events one backward read of RunStart takes.
const runStartPage = 500

// RunStart is the cursor just before the run's first event (its
// user.message), read back from the log's end, where a run an adapter
// streams was logged recently: a run's stream, and a stream resumed inside
// a run, start there. A run the log does not name starts at 0.
func RunStart(ctx context.Context, read ReadEvents, runID string) (int64, error) {
	_, hi, err := read(ctx, 0, 1)
	if err != nil {
		return 0, err
	}
	for hi > 0 {
		lo := max(0, hi-runStartPage)
		evs, _, err := read(ctx, lo, int(hi-lo))
		if err != nil {
			return 0, err
		}
		for i := len(evs) - 1; i >= 0; i-- {
			if e := evs[i]; e.Type == rein.EventUserMessage && e.RunID == runID {
				return e.Seq - 1, nil
			}
		}
		hi = lo
	}
	return 0, nil
}
