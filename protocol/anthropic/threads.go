package anthropic

import (
	"context"
	"net/http"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store"
)

// A session's threads (decision 0102): the primary thread is the session
// itself (its id is the session's), and each subagent child Rein made for
// it — and their children, in turn — is a child thread whose id is the
// child session's. A thread's events and stream are that session's log,
// rendered as the session's are; the parent's log shows the threads as
// session.thread_created, session.thread_status_running and
// session.thread_status_idle.

// maxThreadDepth bounds the walk from a thread up to its session: deeper
// chains than Rein's subagent depth limit do not exist.
const maxThreadDepth = 32

// threadJSON is a Managed Agents session thread.
type threadJSON struct {
	ID             string    `json:"id"`
	Type           string    `json:"type"`
	Agent          agentJSON `json:"agent"`
	ArchivedAt     *string   `json:"archived_at"`
	CreatedAt      string    `json:"created_at"`
	ParentThreadID *string   `json:"parent_thread_id"`
	SessionID      string    `json:"session_id"`
	Stats          *struct{} `json:"stats"`
	Status         string    `json:"status"`
	UpdatedAt      string    `json:"updated_at"`
	Usage          *struct{} `json:"usage"`
	WorkflowRunID  *string   `json:"workflow_run_id"`
}

// toThreadJSON renders s as a thread of session root.
func toThreadJSON(root string, s *store.Session, busy bool) threadJSON {
	sj := toSessionJSON(s, busy)
	out := threadJSON{
		ID: s.ID, Type: "session_thread", Agent: sj.Agent, ArchivedAt: sj.ArchivedAt,
		CreatedAt: sj.CreatedAt, SessionID: root, Status: sj.Status, UpdatedAt: sj.UpdatedAt,
	}
	if s.ID != root {
		parent := s.ParentID
		out.ParentThreadID = &parent
	}
	return out
}

// threadKey is the session whose log a thread is, after checking that the
// thread belongs to the path's session (a thread of another session, or
// of another owner, is not found, as a missing one).
func (h *Handler) threadKey(ctx context.Context, r *http.Request) (rein.SessionKey, *store.Session, error) {
	root := sessionKey(r)
	tid := r.PathValue("thread")
	key := rein.SessionKey{Owner: root.Owner, ID: tid}
	s, err := h.svc.Session(ctx, key)
	if err != nil {
		return key, nil, err
	}
	for at, depth := s, 0; at.ID != root.ID; depth++ {
		if at.ParentID == "" || depth == maxThreadDepth {
			return key, nil, rein.Errorf(rein.CodeNotFound, "thread %s of session %s not found", tid, root.ID)
		}
		if at, err = h.svc.Session(ctx, rein.SessionKey{Owner: root.Owner, ID: at.ParentID}); err != nil {
			if rein.CodeOf(err) == rein.CodeNotFound {
				err = rein.Errorf(rein.CodeNotFound, "thread %s of session %s not found", tid, root.ID)
			}
			return key, nil, err
		}
	}
	return key, s, nil
}

// logKey is the log a request reads: the path's session, or with a
// {thread} in the path, that thread's.
func (h *Handler) logKey(r *http.Request) (rein.SessionKey, error) {
	if r.PathValue("thread") == "" {
		return sessionKey(r), nil
	}
	key, _, err := h.threadKey(r.Context(), r)
	return key, err
}

// listThreads is threads.list: the primary thread, then every child
// thread, breadth first, oldest first at each level. A session has few
// threads (its subagents), so the list is one page.
func (h *Handler) listThreads(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	if _, err := pageLimit(r); err != nil {
		h.writeError(w, r, err)
		return
	}
	root := sessionKey(r)
	info, err := h.svc.GetSession(ctx, root)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	out := []threadJSON{toThreadJSON(root.ID, info.Session, info.Busy)}
	level := []string{root.ID}
	for depth := 0; len(level) > 0 && depth < maxThreadDepth; depth++ {
		var next []string
		for _, id := range level {
			kids, err := h.svc.Children().List(ctx, rein.SessionKey{Owner: root.Owner, ID: id})
			if err != nil {
				h.writeError(w, r, err)
				return
			}
			for _, k := range kids {
				busy, err := h.busy(ctx, rein.SessionKey{Owner: root.Owner, ID: k.ID})
				if err != nil {
					h.writeError(w, r, err)
					return
				}
				out = append(out, toThreadJSON(root.ID, k, busy))
				next = append(next, k.ID)
			}
		}
		level = next
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": out, "next_page": nil, "prev_page": nil})
}

// busy reports whether a session has a run running or queued.
func (h *Handler) busy(ctx context.Context, key rein.SessionKey) (bool, error) {
	info, err := h.svc.GetSession(ctx, key)
	if err != nil {
		return false, err
	}
	return info.Busy, nil
}

// getThread is threads.get.
func (h *Handler) getThread(w http.ResponseWriter, r *http.Request) {
	key, s, err := h.threadKey(r.Context(), r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	busy, err := h.busy(r.Context(), key)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toThreadJSON(sessionKey(r).ID, s, busy))
}

// archiveThread is threads.archive: the thread is marked archived, as an
// archived session is; archiving the primary thread archives the session.
// A child thread stays continuable by its parent agent (Rein's subagents
// are); archived is what the thread shows.
func (h *Handler) archiveThread(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := ctxOK(r)
	defer cancel()
	key, _, err := h.threadKey(ctx, r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	if err := h.markArchived(ctx, key); err != nil {
		h.writeError(w, r, err)
		return
	}
	info, err := h.svc.GetSession(ctx, key)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toThreadJSON(sessionKey(r).ID, info.Session, info.Busy))
}

// markArchived records in a session's metadata when it was archived;
// archiving it again changes nothing.
func (h *Handler) markArchived(ctx context.Context, key rein.SessionKey) error {
	sess, err := h.svc.Session(ctx, key)
	if err != nil {
		return err
	}
	md, pm := splitMeta(sess.Metadata)
	if pm.ArchivedAt != "" {
		return nil
	}
	pm.ArchivedAt = rein.FormatTime(time.Now())
	raw, err := joinMeta(md, pm)
	if err != nil {
		return err
	}
	_, err = h.svc.UpdateSession(ctx, key, sessions.UpdateSessionRequest{Metadata: raw})
	return err
}
