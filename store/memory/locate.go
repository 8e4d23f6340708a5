package memory

import (
	"context"

	"github.com/reinhq/rein/store"
)

var _ store.RunLocator = (*Store)(nil)

// RunSession implements store.RunLocator.
func (s *Store) RunSession(ctx context.Context, owner, runID string) (string, error) {
	if err := s.lock(ctx); err != nil {
		return "", err
	}
	defer s.mu.Unlock()
	key, ok := s.runIDs[runID]
	if !ok || key.Owner != owner || s.sessions[key] == nil {
		return "", notFound("run")
	}
	return key.ID, nil
}
