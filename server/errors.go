package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/protocol"
)

// errorBody is the docs/api.md error object.
type errorBody struct {
	Code    rein.Code `json:"code"`
	Message string    `json:"message"`
	Param   string    `json:"param,omitempty"`
	RunID   string    `json:"run_id,omitempty"`
	// Status is the status of the run a conflict is about (an edit or a
	// promote of a run that has left the queue), with its run_id.
	Status rein.RunStatus `json:"status,omitempty"`
	// RequestID is the request's X-Request-Id: the key to the server's log
	// line that holds what the message leaves out.
	RequestID string `json:"request_id,omitempty"`
}

// The messages of answers whose cause is not one of Rein's own rules (a
// bug, a failing database): the cause names hosts, files and driver
// internals, so it goes to the log and the client is told what happened
// and what it can do.
const (
	msgInternal    = "the server failed on this request; retry, and if it keeps failing, give the server's operator the request id"
	msgUnavailable = "the server cannot use its store right now; retry later"
)

// retryAfterSeconds is the Retry-After of a too_many_requests answer: a
// slot frees as soon as another stream of the owner closes, so a short
// wait is enough.
const retryAfterSeconds = 5

// publicError turns err into what a client may see: its code, its status,
// and a message that never carries a stack trace or an internal cause
// (decisions 0053 and 0081). An error without a code is internal.
func publicError(err error) (int, errorBody) {
	var re *rein.Error
	if !errors.As(err, &re) || re.Code == rein.CodeInternal || re.Code.HTTPStatus() == http.StatusInternalServerError {
		return http.StatusInternalServerError, errorBody{Code: rein.CodeInternal, Message: msgInternal}
	}
	body := errorBody{Code: re.Code, Param: re.Param}
	if re.Code == rein.CodeSessionBusy {
		body.RunID = re.RunID
	}
	if re.Code == rein.CodeConflict && re.RunStatus != "" {
		body.RunID, body.Status = re.RunID, re.RunStatus
	}
	if re.Code == rein.CodeUnavailable && foreignCause(re) {
		body.Message = msgUnavailable
	} else if body.Message = publicMessage(re); body.Message == "" {
		body.Message = genericMessage(re.Code)
	}
	return re.Code.HTTPStatus(), body
}

// foreignCause reports whether re's chain holds an error that is not a
// *rein.Error: a cause from outside Rein's rules (a driver, the network,
// the file system), which only the log may see. The protocol adapters
// answer by the same rule.
var foreignCause = protocol.HasForeignCause

// publicMessage is re's message as it is: rein.Errorf keeps a cause's
// text out of it (decision 0081), and a message built by hand holds what
// its author wrote for the client. Only a leading "<code>: " is dropped,
// so that no answer repeats its code. "" when there is nothing to show.
func publicMessage(re *rein.Error) string {
	return strings.TrimPrefix(re.Message, string(re.Code)+": ")
}

// genericMessage stands in for a message that could not be shown.
func genericMessage(c rein.Code) string {
	switch c {
	case rein.CodeUnauthenticated:
		return "a valid bearer token is required (Authorization: Bearer TOKEN)"
	case rein.CodeNotFound:
		return "not found"
	case rein.CodeInvalidArgument:
		return "the request is invalid"
	case rein.CodeSessionBusy:
		return "the session is busy with another run"
	case rein.CodeConflict:
		return "the request conflicts with the current state; read it again and retry"
	case rein.CodeTooLarge:
		return "the request body is too large"
	case rein.CodeTooManyRequests:
		return "too many requests; retry later"
	case rein.CodeUnavailable:
		return "the server is unavailable; retry later"
	}
	return msgInternal
}

// writeError answers err as a JSON error body carrying the request id, and
// logs, under that id, the full error whenever the answer leaves something
// out. extra fields (e.g. a batch's "results") join the top level.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error, extra map[string]any) {
	status, body := publicError(unavailableOnDeadline(err))
	info := infoOf(r.Context())
	body.RequestID = info.id
	info.errCode = body.Code
	switch {
	case errors.Is(err, context.Canceled):
		s.log.Debug("request abandoned by the client", "request_id", info.id, "err", err)
	case isOverload(err):
		// The service logs when overload begins and ends; a line per
		// refused request would flood the log when it can least afford it.
		s.log.Debug("request refused: overloaded", "request_id", info.id, "err", err)
	case status >= 500 || hidesCause(err):
		level := s.log.Warn
		if status == http.StatusInternalServerError {
			level = s.log.Error
		}
		level("request failed", "request_id", info.id, "status", status, "code", body.Code,
			"owner", info.owner, "session", info.session, "run", info.run, "err", err)
	}
	out := map[string]any{"error": body}
	for k, v := range extra {
		out[k] = v
	}
	switch status {
	case http.StatusUnauthorized:
		w.Header().Set("WWW-Authenticate", `Bearer realm="rein"`)
	case http.StatusTooManyRequests:
		w.Header().Set("Retry-After", strconv.Itoa(retryAfterSeconds))
	case http.StatusServiceUnavailable:
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter(err)))
	}
	writeJSON(w, status, out)
}

// hidesCause reports whether err's answer leaves a cause out: the cause
// is then logged, whatever the status.
func hidesCause(err error) bool {
	var re *rein.Error
	return !errors.As(err, &re) || foreignCause(re)
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
		buf.WriteString(`{"error":{"code":"internal","message":"` + msgInternal + `"}}` + "\n")
	}
	writeJSONBytes(w, status, buf.Bytes())
}

// writeJSONBytes answers with b, a JSON document already encoded.
func writeJSONBytes(w http.ResponseWriter, status int, b []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
