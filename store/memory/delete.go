package memory

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

// DeleteSession implements store.Deleter. The store lock, held from the
// first read of the tree to the last map deletion, is what makes the check
// and the deletion one transaction.
func (s *Store) DeleteSession(ctx context.Context, key rein.SessionKey, check func(now time.Time, tree []*store.TreeSession) error) ([]*store.Session, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	root, err := s.get(key)
	if err != nil {
		return nil, err
	}
	now := s.now()
	nodes := s.tree(key, root)
	tree := make([]*store.TreeSession, len(nodes))
	for i, n := range nodes {
		// A read-only transaction view, so the tree is read with the
		// same code (and ordering) as Tx.Runs and Tx.Lease.
		t := &tx{s: s, ss: n.ss, key: n.key, now: now}
		active, err := t.Runs(rein.StatusQueued, rein.StatusRunning)
		if err != nil {
			return nil, err
		}
		lease, err := t.Lease()
		if err != nil {
			return nil, err
		}
		last := n.ss.rec.CreatedAt
		if len(n.ss.events) > 0 {
			last = n.ss.events[len(n.ss.events)-1].CreatedAt
		}
		tree[i] = &store.TreeSession{Session: n.ss.rec.Clone(), Active: active, Lease: lease, LastActivity: last}
	}
	if check != nil {
		if err := check(now, tree); err != nil {
			return nil, err
		}
	}
	out := make([]*store.Session, len(nodes))
	for i, n := range nodes {
		for id, r := range n.ss.runs {
			delete(s.runIDs, id)
			if !r.EndedAt.IsZero() {
				s.unindexEnd(endedRun{r.EndedAt, id, n.key})
			}
		}
		delete(s.sessions, n.key)
		s.forgetOutbox(n.key)
		// Waiters wake, look the session up and find it gone.
		n.ss.wakeWaiters()
		out[i] = tree[i].Session
	}
	return out, nil
}

type treeNode struct {
	key rein.SessionKey
	ss  *session
}

// tree returns root and every session below it, parents before children,
// siblings in creation order. Called with the store lock held.
func (s *Store) tree(key rein.SessionKey, root *session) []treeNode {
	children := map[string][]treeNode{}
	for k, ss := range s.sessions {
		if k.Owner == key.Owner && ss.rec.ParentID != "" {
			children[ss.rec.ParentID] = append(children[ss.rec.ParentID], treeNode{key: k, ss: ss})
		}
	}
	out := []treeNode{{key: key, ss: root}}
	seen := map[string]bool{key.ID: true}
	for i := 0; i < len(out); i++ {
		kids := children[out[i].key.ID]
		slices.SortFunc(kids, func(a, b treeNode) int {
			return cmp.Or(a.ss.rec.CreatedAt.Compare(b.ss.rec.CreatedAt), cmp.Compare(a.ss.order, b.ss.order))
		})
		for _, k := range kids {
			if !seen[k.key.ID] {
				seen[k.key.ID] = true
				out = append(out, k)
			}
		}
	}
	return out
}

// ListInactive implements store.Deleter.
func (s *Store) ListInactive(ctx context.Context, before time.Time, after rein.SessionKey, limit int) ([]store.SessionActivity, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	out := []store.SessionActivity{}
	for k, ss := range s.sessions {
		if ss.rec.ParentID != "" || compareKeys(k, after) <= 0 {
			continue
		}
		last := ss.rec.CreatedAt
		if len(ss.events) > 0 {
			last = ss.events[len(ss.events)-1].CreatedAt
		}
		if last.Before(before) {
			out = append(out, store.SessionActivity{Key: k, LastActivity: last})
		}
	}
	slices.SortFunc(out, func(a, b store.SessionActivity) int { return compareKeys(a.Key, b.Key) })
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

func compareKeys(a, b rein.SessionKey) int {
	return cmp.Or(strings.Compare(a.Owner, b.Owner), strings.Compare(a.ID, b.ID))
}
