package memory

// Exclusive implements store.Exclusive: a memory store lives in one
// process, so a run its process does not hold was left by a service that is
// gone.
func (s *Store) Exclusive() bool { return true }
