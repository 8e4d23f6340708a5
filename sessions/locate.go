package sessions

import (
	"context"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

// FindRun returns the owner's run with that id, whichever of the owner's
// sessions holds it (the record's Owner and SessionID say which): for a
// caller that knows a run by its id alone, as A2A's task calls do. An
// unknown run and another owner's run are both rein.ErrNotFound. A store
// that locates runs (store.RunLocator) answers in one read; otherwise the
// owner's sessions are searched, one read each.
func (s *Service) FindRun(ctx context.Context, owner, runID string) (*store.RunRecord, error) {
	if runID == "" {
		return nil, rein.InvalidArgument("run_id", "run_id must be a non-empty string")
	}
	if loc, ok := s.st.(store.RunLocator); ok {
		sid, err := loc.RunSession(ctx, owner, runID)
		if err != nil {
			return nil, err
		}
		return s.st.GetRun(ctx, rein.SessionKey{Owner: owner, ID: sid}, runID)
	}
	list, err := s.st.ListSessions(ctx, owner)
	if err != nil {
		return nil, err
	}
	for _, sess := range list {
		rec, err := s.st.GetRun(ctx, sess.Key(), runID)
		if rein.CodeOf(err) == rein.CodeNotFound {
			continue
		}
		return rec, err
	}
	return nil, rein.Errorf(rein.CodeNotFound, "run not found")
}
