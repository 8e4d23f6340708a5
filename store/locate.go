package store

import "context"

// RunLocator is an optional capability of a Store, found by type
// assertion: the session of a run known by its id alone. A protocol whose
// calls name a task but not its conversation (A2A's GetTask, CancelTask,
// SubscribeToTask) needs it; a store without it is searched session by
// session (sessions.Service.FindRun), which is correct but costs a read
// per session of the owner.
type RunLocator interface {
	// RunSession returns the id of the owner's session that holds the
	// run. It MUST answer rein.ErrNotFound for an unknown run and for
	// another owner's run alike, so the answer reveals nothing of other
	// owners.
	RunSession(ctx context.Context, owner, runID string) (sessionID string, err error)
}
