package server

import (
	"net/http"
	"strconv"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

// deliveryJSON is a webhook delivery as the API shows it (docs/api.md).
type deliveryJSON struct {
	ID        string  `json:"id"`
	Webhook   string  `json:"webhook"`
	EventSeq  int64   `json:"event_seq"`
	SessionID string  `json:"session_id"`
	Type      string  `json:"type"`
	Status    string  `json:"status"`
	Attempts  int     `json:"attempts"`
	LastError *string `json:"last_error"`
	NextAt    *string `json:"next_at"`
	CreatedAt string  `json:"created_at"`
}

func toDeliveryJSON(d *store.Delivery) deliveryJSON {
	out := deliveryJSON{ID: d.ID, Webhook: d.Destination, EventSeq: d.Seq, SessionID: d.SessionID, Type: string(d.Type),
		Status: string(d.Status), Attempts: d.Attempts, LastError: optional(d.LastError), CreatedAt: rein.FormatTime(d.CreatedAt)}
	if d.Status == store.DeliveryPending && !d.NextAt.IsZero() {
		out.NextAt = optional(rein.FormatTime(d.NextAt))
	}
	return out
}

const (
	defaultDeliveryLimit = 100
	maxDeliveryLimit     = 1000
)

// listDeliveries is GET /api/webhooks/deliveries: the caller's deliveries
// by id (creation order), a page at a time.
func (s *Server) listDeliveries(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	query := store.DeliveryQuery{Limit: defaultDeliveryLimit, After: q.Get("after")}
	if v := q.Get("status"); v != "" || q.Has("status") {
		if !store.DeliveryStatus(v).Valid() {
			s.writeError(w, r, rein.InvalidArgument("status", "status must be pending, failed or delivered"), nil)
			return
		}
		query.Status = store.DeliveryStatus(v)
	}
	if v := q.Get("limit"); v != "" || q.Has("limit") {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			s.writeError(w, r, rein.InvalidArgument("limit", "limit must be a positive number"), nil)
			return
		}
		query.Limit = min(n, maxDeliveryLimit)
	}
	out := []deliveryJSON{}
	var next *string
	if s.outbox != nil {
		list, err := s.outbox.ListDeliveries(r.Context(), ownerOf(r), query)
		if err != nil {
			s.writeError(w, r, err, nil)
			return
		}
		for _, d := range list {
			out = append(out, toDeliveryJSON(d))
		}
		if len(list) == query.Limit {
			next = optional(list[len(list)-1].ID)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"deliveries": out, "next": next})
}

// retryDelivery is POST /api/webhooks/deliveries/{id}/retry: pending
// again, due now. Another owner's delivery is not found.
func (s *Server) retryDelivery(w http.ResponseWriter, r *http.Request) {
	if s.outbox == nil {
		s.writeError(w, r, rein.Errorf(rein.CodeNotFound, "delivery not found"), nil)
		return
	}
	d, err := s.outbox.RetryDelivery(r.Context(), ownerOf(r), r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err, nil)
		return
	}
	writeJSON(w, http.StatusOK, toDeliveryJSON(d))
}
