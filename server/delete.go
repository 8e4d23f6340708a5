package server

import "net/http"

// deleteSession is DELETE /api/sessions/{id}: the session and every
// session below it (its subagent children, theirs, ...) are deleted for
// good, with their workspaces, if none of them has a queued or running
// run (else 409 session_busy naming one). 204 with no body.
func (s *Server) deleteSession(w http.ResponseWriter, r *http.Request) {
	if err := s.svc.DeleteSession(r.Context(), sessionKey(r)); err != nil {
		s.writeError(w, r, err, nil)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
