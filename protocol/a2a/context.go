package a2a

import (
	"context"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store"
)

// createContext creates the caller's session for a contextId it does not
// have yet.
func createContext(ctx context.Context, svc *sessions.Service, c caller, contextID string) (*store.Session, error) {
	return nil, rein.Errorf(rein.CodeNotFound, "no context %q", contextID)
}
