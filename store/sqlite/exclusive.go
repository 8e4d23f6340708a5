package sqlite

// Exclusive implements store.Exclusive: the file lock admits one process,
// so a run that process does not hold was left by one that is gone.
func (s *Store) Exclusive() bool { return true }
