package sqlite

import "github.com/reinhq/rein/store"

var (
	_ store.Backlog       = (*Store)(nil)
	_ store.AsyncAppender = (*Store)(nil)
)

// Backlog implements store.Backlog: the operations waiting for the writer
// goroutine. A caller beyond the queue's capacity blocks in submit and is
// not counted, so pending == capacity means "full, and maybe more".
func (s *Store) Backlog() (pending, capacity int) { return len(s.ops), cap(s.ops) }
