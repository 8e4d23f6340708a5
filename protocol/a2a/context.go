package a2a

import (
	"context"

	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store"
)

// createContext creates the caller's session for a contextId it does not
// have yet: the context id becomes the session's caller-chosen id. A
// concurrent first message with the same id gets the same session (the
// create is idempotent per owner); an id another owner holds is a
// conflict.
func createContext(ctx context.Context, svc *sessions.Service, c caller, contextID string) (*store.Session, error) {
	return svc.CreateSession(ctx, c.owner, sessions.CreateSessionRequest{ID: contextID, Agent: c.agent})
}
