package postgres

import "github.com/reinhq/rein/store"

var _ store.Backlog = (*Store)(nil)

// Backlog implements store.Backlog: the appends waiting for the append
// writers (transactions of Update take pool connections and are bounded by
// the pool instead).
func (s *Store) Backlog() (pending, capacity int) { return len(s.appends), cap(s.appends) }
