package openai_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/model"
	"github.com/reinhq/rein/model/openai"
)

// The interop test runs the provider against an OpenAI-compatible server
// that nobody in this project wrote: the npm package @dwmkerr/mock-llm,
// installed by tools/mock-llm/install.sh. It streams text only, so the
// test covers streaming text and cancelling mid-stream.

const mockLLMDir = "../../tools/mock-llm"

const interopReply = "Hello from mock-llm, streamed in small pieces."

// interopConfig makes every request answer interopReply, and a request
// whose last message mentions "slow" answer a long text, streamed four
// characters every 20 ms (streaming settings are global in mock-llm).
var interopConfig = `
streaming:
  chunkSize: 4
  chunkIntervalMs: 20
rules:
  - path: "/v1/chat/completions"
    method: "POST"
    match: "@"
    response:
      status: 200
      content: |
        {"id": "chatcmpl-interop", "object": "chat.completion", "model": "{{jmes request body.model}}",
         "choices": [{"index": 0, "message": {"role": "assistant", "content": "` + interopReply + `"}, "finish_reason": "stop"}]}
  - path: "/v1/chat/completions"
    method: "POST"
    match: "contains(body.messages[-1].content, 'slow')"
    response:
      status: 200
      content: |
        {"id": "chatcmpl-slow", "object": "chat.completion", "model": "{{jmes request body.model}}",
         "choices": [{"index": 0, "message": {"role": "assistant", "content": "` + strings.Repeat("a slow reply ", 400) + `"}, "finish_reason": "stop"}]}
`

// startMockLLM starts mock-llm on a free loopback port and returns its
// base URL once it says it is listening.
func startMockLLM(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("interop test skipped: Node.js (node) is not installed; install it and run tools/mock-llm/install.sh")
	}
	main := filepath.Join(mockLLMDir, "node_modules", "@dwmkerr", "mock-llm", "dist", "main.js")
	if _, err := os.Stat(main); err != nil {
		t.Skipf("interop test skipped: @dwmkerr/mock-llm is not installed (%v); run tools/mock-llm/install.sh", err)
	}
	main, _ = filepath.Abs(main)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()

	dir := t.TempDir()
	cfg := filepath.Join(dir, "mock-llm.yaml")
	if err := os.WriteFile(cfg, []byte(interopConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, main, "--config", cfg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOST=127.0.0.1", fmt.Sprintf("PORT=%d", port))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout // one pipe, one reader
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}

	// Readiness is the server's own "running on" line, not a poll.
	ready := make(chan struct{})
	var mu sync.Mutex
	var log strings.Builder
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(out)
		signalled := false
		for sc.Scan() {
			mu.Lock()
			log.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if !signalled && strings.Contains(sc.Text(), "server running on") {
				signalled = true
				close(ready)
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		_ = cmd.Wait()
	})
	timer := time.NewTimer(20 * time.Second)
	defer timer.Stop()
	select {
	case <-ready:
	case <-done:
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("mock-llm exited before it was ready:\n%s", log.String())
	case <-timer.C:
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("mock-llm was not ready within 20s:\n%s", log.String())
	}
	return fmt.Sprintf("http://127.0.0.1:%d/v1", port)
}

func TestInteropMockLLM(t *testing.T) {
	base := startMockLLM(t)
	m, err := openai.New(openai.Config{Model: "gpt-4o-mini", APIKey: "mock-key", BaseURL: base})
	if err != nil {
		t.Fatal(err)
	}
	req := func(text string) *model.Request {
		return &model.Request{System: "You are a test.", Messages: []rein.Message{{Role: rein.RoleUser, Text: text}}}
	}

	t.Run("streams text", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		s, err := m.Stream(ctx, req("Say hello."))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		var text strings.Builder
		deltas := 0
		var fin model.Chunk
		for {
			c, err := s.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("Recv: %v", err)
			}
			switch c.Kind {
			case model.ChunkText:
				deltas++
				text.WriteString(c.Text)
			case model.ChunkFinish:
				fin = c
			}
		}
		if text.String() != interopReply || deltas < 2 {
			t.Errorf("text %q in %d deltas, want %q streamed", text.String(), deltas, interopReply)
		}
		if fin.Finish != model.FinishStop || fin.FinishRaw != "stop" {
			t.Errorf("finish %+v", fin)
		}
	})

	t.Run("cancel mid-stream", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		s, err := m.Stream(ctx, req("Answer slowly."))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if c, err := s.Recv(); err != nil || c.Kind != model.ChunkText {
			t.Fatalf("first Recv = %+v, %v", c, err)
		}
		ch := make(chan error, 1)
		go func() {
			for {
				if _, err := s.Recv(); err != nil {
					ch <- err
					return
				}
			}
		}()
		start := time.Now()
		cancel()
		timer := time.NewTimer(5 * time.Second)
		defer timer.Stop()
		select {
		case err := <-ch:
			// A Recv that ignored the cancel would read on through the slow
			// reply, about 26 s of chunks: a second tells the two apart
			// even on a loaded CI machine under -race.
			if d := time.Since(start); d > time.Second {
				t.Errorf("Recv returned %v after cancel, want within 1s", d)
			}
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Recv after cancel = %v, want context.Canceled", err)
			}
		case <-timer.C:
			t.Fatal("Recv did not return within 5s of cancel")
		}
	})
}
