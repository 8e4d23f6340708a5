package agui_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/reinhq/rein/internal/id"
	"github.com/reinhq/rein/protocol"
	"github.com/reinhq/rein/protocol/agui"
	"github.com/reinhq/rein/protocol/protocoltest"
	"github.com/reinhq/rein/sessions"
)

// benchAPIs are the native API and /ag-ui on one server over one SQLite
// store: a RunAgentInput POST answers with its run's stream, the cancel
// route (by the client's runId) cancels it.
func benchAPIs(b *testing.B) []protocoltest.BenchAPI {
	srv := protocoltest.BenchServer(b, func(svc *sessions.Service) []protocol.Mount {
		return []protocol.Mount{agui.Mount(svc, agui.Options{})}
	})
	return []protocoltest.BenchAPI{
		protocoltest.NativeAPI(srv.HTTP, srv.URL),
		{
			Name: "ag-ui",
			Open: func(b *testing.B) protocoltest.BenchSession {
				thread := id.New("thread_")
				var run string
				return protocoltest.BenchSession{
					Send: func(text string) io.ReadCloser {
						run = id.New("run_")
						body := `{"threadId":"` + thread + `","runId":"` + run + `","state":{},"tools":[],"context":[],"messages":[{"id":"` + id.New("msg_") + `","role":"user","content":"` + text + `"}]}`
						req, err := http.NewRequestWithContext(b.Context(), http.MethodPost, srv.URL+"/ag-ui/default", strings.NewReader(body))
						if err != nil {
							b.Fatal(err)
						}
						req.Header.Set("Content-Type", "application/json")
						req.Header.Set("Accept", "text/event-stream")
						resp, err := srv.HTTP.Do(req)
						return protocoltest.BenchStream(b, resp, err)
					},
					Stop: func() {
						protocoltest.Call(b, srv.HTTP, http.MethodPost, srv.URL+"/ag-ui/default/threads/"+thread+"/runs/"+run+"/cancel", ``)
					},
				}
			},
			Text: protocoltest.Contains(`"type":"TEXT_MESSAGE_CONTENT"`),
			End:  protocoltest.Contains(`"type":"RUN_FINISHED"`),
		},
	}
}

// The adapter's cost against the native API, in one run (docs/performance.md):
// message → first text, a stop → the run's end on the stream, and CPU per
// streamed chunk.
func BenchmarkFirstText(b *testing.B) { protocoltest.BenchFirstText(b, benchAPIs(b)...) }
func BenchmarkStopToEnd(b *testing.B) { protocoltest.BenchStopToEnd(b, benchAPIs(b)...) }
func BenchmarkStreamCPU(b *testing.B) { protocoltest.BenchStreamCPU(b, benchAPIs(b)...) }
