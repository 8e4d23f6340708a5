package aisdk_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/reinhq/rein/internal/id"
	"github.com/reinhq/rein/protocol"
	"github.com/reinhq/rein/protocol/aisdk"
	"github.com/reinhq/rein/protocol/protocoltest"
	"github.com/reinhq/rein/sessions"
)

// benchAPIs are the native API and /ai-sdk on one server over one SQLite
// store: a chat's message POST answers with its run's stream, the stop
// route cancels it.
func benchAPIs(b *testing.B) []protocoltest.BenchAPI {
	srv := protocoltest.BenchServer(b, func(svc *sessions.Service) []protocol.Mount {
		return []protocol.Mount{aisdk.Mount(svc, aisdk.Options{})}
	})
	return []protocoltest.BenchAPI{
		protocoltest.NativeAPI(srv.HTTP, srv.URL),
		{
			Name: "ai-sdk",
			Open: func(b *testing.B) protocoltest.BenchSession {
				chat := id.New("chat_")
				return protocoltest.BenchSession{
					Send: func(text string) io.ReadCloser {
						body := `{"id":"` + chat + `","trigger":"submit-message","messages":[{"id":"` + id.New("msg_") + `","role":"user","parts":[{"type":"text","text":"` + text + `"}]}]}`
						req, err := http.NewRequestWithContext(b.Context(), http.MethodPost, srv.URL+"/ai-sdk/chat", strings.NewReader(body))
						if err != nil {
							b.Fatal(err)
						}
						req.Header.Set("Content-Type", "application/json")
						resp, err := srv.HTTP.Do(req)
						return protocoltest.BenchStream(b, resp, err)
					},
					Stop: func() {
						protocoltest.Call(b, srv.HTTP, http.MethodPost, srv.URL+"/ai-sdk/chat/"+chat+"/stop", `{"mode":"cancel"}`)
					},
				}
			},
			Text: protocoltest.Contains(`"type":"text-delta"`),
			End:  protocoltest.Contains(`"type":"finish"`),
		},
	}
}

// The adapter's cost against the native API, in one run (docs/performance.md):
// message → first text, a stop → the run's end on the stream, and CPU per
// streamed chunk.
func BenchmarkFirstText(b *testing.B) { protocoltest.BenchFirstText(b, benchAPIs(b)...) }
func BenchmarkStopToEnd(b *testing.B) { protocoltest.BenchStopToEnd(b, benchAPIs(b)...) }
func BenchmarkStreamCPU(b *testing.B) { protocoltest.BenchStreamCPU(b, benchAPIs(b)...) }
