package client

import (
	"errors"
	"testing"

	"github.com/reinhq/rein"
)

func TestQueueCallsOnTheWire(t *testing.T) {
	t.Parallel()
	text, pos := "edited", 2
	answer := `{"run_id":"run_2","status":"QUEUED","reason":null,"created_at":"2025-01-01T00:00:00Z","started_at":null,"ended_at":null,"input":"edited","client_id":"tab-1","position":2}`
	for _, tc := range []struct {
		name         string
		call         func(c *Client) (*Run, error)
		method, path string
		body         string
	}{
		{"edit", func(c *Client) (*Run, error) {
			return c.EditRun(t.Context(), "ses 1", "run_2", EditRunRequest{Text: &text, Position: &pos})
		}, "PATCH", "/api/sessions/ses%201/runs/run_2", `{"text":"edited","position":2}`},
		{"move", func(c *Client) (*Run, error) {
			return c.EditRun(t.Context(), "ses 1", "run_2", EditRunRequest{Position: &pos})
		}, "PATCH", "/api/sessions/ses%201/runs/run_2", `{"position":2}`},
		{"promote", func(c *Client) (*Run, error) {
			return c.PromoteRun(t.Context(), "ses 1", "run_2", rein.WhenBusyRollback)
		}, "POST", "/api/sessions/ses%201/runs/run_2/promote", `{"mode":"rollback"}`},
		{"promote default", func(c *Client) (*Run, error) {
			return c.PromoteRun(t.Context(), "ses 1", "run_2", "")
		}, "POST", "/api/sessions/ses%201/runs/run_2/promote", `{}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec, c := newRecorder(t, 200, answer)
			run, err := tc.call(c)
			if err != nil {
				t.Fatal(err)
			}
			if rec.method != tc.method || rec.path != tc.path {
				t.Fatalf("%s %s, want %s %s", rec.method, rec.path, tc.method, tc.path)
			}
			jsonEq(t, rec.reqBody, tc.body)
			if run.Input != "edited" || run.ClientID != "tab-1" || run.Position != 2 || run.Status != rein.StatusQueued {
				t.Fatalf("run = %+v", run)
			}
		})
	}
}

func TestQueueConflictCarriesTheRunStatus(t *testing.T) {
	t.Parallel()
	_, c := newRecorder(t, 409, `{"error":{"code":"conflict","message":"the run is no longer queued (RUNNING)","run_id":"run_2","status":"RUNNING"}}`)
	_, err := c.EditRun(t.Context(), "ses_1", "run_2", EditRunRequest{})
	var ce *Error
	if !errors.Is(err, rein.ErrConflict) || !errors.As(err, &ce) || ce.RunID != "run_2" || ce.RunStatus != rein.StatusRunning {
		t.Fatalf("err = %#v", err)
	}
	var re *rein.Error
	if !errors.As(err, &re) || re.RunID != "run_2" || re.RunStatus != rein.StatusRunning {
		t.Fatalf("as *rein.Error: %+v", re)
	}
}
