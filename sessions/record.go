package sessions

import (
	"context"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

// Session returns a session's record alone: one read of the store, for a
// caller on a request's path that needs the record (its metadata) and
// none of the live state GetSession gathers. Another owner's session is
// rein.ErrNotFound, as for GetSession.
func (s *Service) Session(ctx context.Context, key rein.SessionKey) (*store.Session, error) {
	return s.st.GetSession(ctx, key)
}
