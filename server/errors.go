package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/reinhq/rein"
)

// errorBody is the docs/api.md error object.
type errorBody struct {
	Code    rein.Code `json:"code"`
	Message string    `json:"message"`
	Param   string    `json:"param,omitempty"`
	RunID   string    `json:"run_id,omitempty"`
}

// publicError turns err into what a client may see: its code, its status,
// and a message that never carries a stack trace or an internal cause. An
// error without a code is internal, and its text stays in the logs.
func publicError(err error) (int, errorBody) {
	var re *rein.Error
	if !errors.As(err, &re) {
		return http.StatusInternalServerError, errorBody{Code: rein.CodeInternal, Message: "internal error"}
	}
	if re.Code == rein.CodeInternal {
		return http.StatusInternalServerError, errorBody{Code: rein.CodeInternal, Message: "internal error"}
	}
	body := errorBody{Code: re.Code, Message: re.Message, Param: re.Param}
	if body.Message == "" {
		body.Message = string(re.Code)
	}
	if re.Code == rein.CodeSessionBusy {
		body.RunID = re.RunID
	}
	return re.Code.HTTPStatus(), body
}

// writeError answers err as a JSON error body, logging what the client is
// not told. extra fields (e.g. a batch's "results") join the top level.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error, extra map[string]any) {
	status, body := publicError(err)
	info := infoOf(r.Context())
	switch {
	case status >= 500 && !errors.Is(err, context.Canceled):
		s.log.Error("request failed", "request_id", info.id, "owner", info.owner, "session", info.session, "run", info.run, "err", err)
	case errors.Is(err, context.Canceled):
		s.log.Debug("request abandoned by the client", "request_id", info.id, "err", err)
	}
	info.errCode = body.Code
	out := map[string]any{"error": body}
	for k, v := range extra {
		out[k] = v
	}
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="rein"`)
	}
	writeJSON(w, status, out)
}

// writeJSON answers v as JSON with the status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Every response type here marshals; reaching this is a bug, and
		// the client still gets a well-formed error.
		status = http.StatusInternalServerError
		buf.Reset()
		buf.WriteString(`{"error":{"code":"internal","message":"internal error"}}` + "\n")
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}
