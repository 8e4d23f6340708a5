package a2a_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/reinhq/rein/internal/id"
	"github.com/reinhq/rein/protocol"
	a2aproto "github.com/reinhq/rein/protocol/a2a"
	"github.com/reinhq/rein/protocol/protocoltest"
	"github.com/reinhq/rein/sessions"
)

// benchAPIs are the native API and A2A's HTTP+JSON binding on one server
// over one SQLite store: message:stream answers with the task's stream (its
// first item names the task and its context, the session), and the task's
// :cancel cancels it.
func benchAPIs(b *testing.B) []protocoltest.BenchAPI {
	srv := protocoltest.BenchServer(b, func(svc *sessions.Service) []protocol.Mount {
		return a2aproto.Mounts(a2aproto.Options{Service: svc})
	})
	hasAny := func(ss ...string) func(string) bool {
		return func(line string) bool {
			for _, s := range ss {
				if strings.Contains(line, s) {
					return true
				}
			}
			return false
		}
	}
	rest := srv.URL + "/a2a/default/rest"
	return []protocoltest.BenchAPI{
		protocoltest.NativeAPI(srv.HTTP, srv.URL),
		{
			Name: "a2a",
			Open: func(b *testing.B) protocoltest.BenchSession {
				var contextID, taskID string
				return protocoltest.BenchSession{
					Send: func(text string) io.ReadCloser {
						msg := map[string]any{"messageId": id.New("msg_"), "role": "ROLE_USER", "parts": []any{map[string]any{"text": text}}}
						if contextID != "" {
							msg["contextId"] = contextID
						}
						body, _ := json.Marshal(map[string]any{"message": msg})
						req, err := http.NewRequestWithContext(b.Context(), http.MethodPost, rest+"/message:stream", strings.NewReader(string(body)))
						if err != nil {
							b.Fatal(err)
						}
						req.Header.Set("Content-Type", "application/json")
						req.Header.Set("Accept", "text/event-stream")
						resp, err := srv.HTTP.Do(req)
						stream := protocoltest.BenchStream(b, resp, err)
						// The stream's first item is the task: its id and
						// context (the session) are what a client keeps.
						taskID, contextID = firstTask(b, stream.(interface{ ReadString(byte) (string, error) }))
						return stream
					},
					Stop: func() {
						protocoltest.Call(b, srv.HTTP, http.MethodPost, rest+"/tasks/"+taskID+":cancel", `{}`)
					},
				}
			},
			Text: func(line string) bool {
				return strings.Contains(line, `"statusUpdate"`) && strings.Contains(line, `"text"`)
			},
			End: hasAny(`"TASK_STATE_COMPLETED"`, `"TASK_STATE_CANCELED"`),
		},
	}
}

// firstTask reads the stream's first data line, the task.
func firstTask(b *testing.B, rd interface{ ReadString(byte) (string, error) }) (task, context string) {
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			b.Fatalf("the task stream ended before its task: %v", err)
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		var item struct {
			Task *struct {
				ID        string `json:"id"`
				ContextID string `json:"contextId"`
			} `json:"task"`
		}
		if err := json.Unmarshal([]byte(data), &item); err != nil || item.Task == nil {
			b.Fatalf("the stream's first item is not a task: %s (%v)", data, err)
		}
		return item.Task.ID, item.Task.ContextID
	}
}

// The adapter's cost against the native API, in one run (docs/performance.md):
// message → first text, a stop → the run's end on the stream, and CPU per
// streamed chunk.
func BenchmarkFirstText(b *testing.B) { protocoltest.BenchFirstText(b, benchAPIs(b)...) }
func BenchmarkStopToEnd(b *testing.B) { protocoltest.BenchStopToEnd(b, benchAPIs(b)...) }
func BenchmarkStreamCPU(b *testing.B) { protocoltest.BenchStreamCPU(b, benchAPIs(b)...) }
