package sessions

// SetWaitPrevious sets the hook a claimed run calls when it waits for the
// runs of its session still finishing here, and returns its undo.
func SetWaitPrevious(f func(runID string)) (undo func()) {
	waitPrevious = f
	return func() { waitPrevious = nil }
}
