package sessions

import (
	"context"
	"iter"

	"github.com/reinhq/rein"
)

// eventsPage is how many events one read of the log takes.
const eventsPage = 1000

// Events is a session's log as a Go sequence: the events after the cursor
// after, in seq order, then each new one as it is appended, for as long as
// the caller ranges over it. It is the in-process twin of the HTTP event
// stream and is built the same way — read the log after the cursor, hand
// out what was found, wait on the store for more — so replay and live are
// one loop: the seam between them can neither skip nor repeat an event,
// and a consumer that stops can continue later from the last Seq it saw.
// It works the same for a session whose runs execute on another instance
// sharing the store.
//
// The sequence ends without an error when ctx is done (check ctx.Err() to
// tell), or when the service shuts down (Drain, Close) — then after the
// events the log holds at that moment, which include the end of every run
// the shutdown stopped. A read that fails (rein.ErrNotFound for a session
// the owner does not have, invalid_argument for a negative cursor, a store
// failure) is yielded once as the error, and the sequence ends.
//
// Breaking out of the loop ends it at once; it starts no goroutine that
// outlives it. Ranging over it again starts again from after. Ranging is
// only observing: it never starts or stops a run.
func (s *Service) Events(ctx context.Context, key rein.SessionKey, after int64) iter.Seq2[rein.Event, error] {
	return func(yield func(rein.Event, error) bool) {
		if after < 0 {
			yield(rein.Event{}, rein.InvalidArgument("after", "after must be a sequence number ≥ 0"))
			return
		}
		// Waiting for more ends with the caller or with the service; reads
		// use the caller's context only, so the last read after a shutdown
		// still happens.
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stop := context.AfterFunc(s.ctx, cancel)
		defer stop()
		cursor := after
		for {
			evs, last, err := s.st.ReadEvents(ctx, key, cursor, eventsPage)
			if err != nil {
				if ctx.Err() == nil {
					yield(rein.Event{}, err)
				}
				return
			}
			for _, e := range evs {
				if !yield(e, nil) {
					return
				}
				cursor = e.Seq
			}
			if cursor < last {
				continue // more than a page behind: read on without waiting
			}
			if s.ctx.Err() != nil {
				return
			}
			if err := s.st.WaitEvents(wctx, key, cursor); err != nil {
				switch {
				case ctx.Err() != nil:
					return
				case s.ctx.Err() != nil:
					// One more read takes what the shutdown wrote.
				default:
					yield(rein.Event{}, err)
					return
				}
			}
		}
	}
}
