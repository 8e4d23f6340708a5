package readme

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reinhq/rein/internal/packaging"
)

// TestContainerImageEnvironment stands in for the README's container block,
// which needs Docker: it runs rein as the image does — the Dockerfile's
// ENTRYPOINT and CMD with its ENV, /data a scratch folder — and checks what
// the README says of it: without tokens it refuses to start on 0.0.0.0;
// with a tokens file it serves (the HEALTHCHECK's URL answers, the API
// wants a token), keeps its database in /data, and exits 0 on SIGTERM
// (docker stop). internal/packaging checks the rest of the image's rules.
func TestContainerImageEnvironment(t *testing.T) {
	if testing.Short() {
		t.Skip("builds rein")
	}
	src, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	stages, err := packaging.ParseDockerfile(string(src))
	if err != nil {
		t.Fatalf("Dockerfile: %v", err)
	}
	final := stages[len(stages)-1]
	ep, ok1 := final.Last("ENTRYPOINT")
	cmdIn, ok2 := final.Last("CMD")
	hc, ok3 := final.Last("HEALTHCHECK")
	if !ok1 || !ok2 || !ok3 || len(ep.Words()) == 0 {
		t.Fatalf("Dockerfile: the final stage needs ENTRYPOINT, CMD and HEALTHCHECK (internal/packaging says which rule breaks)")
	}
	bin := reinBinary(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(filepath.Join(data, "workspace"), 0o755); err != nil {
		t.Fatal(err)
	}
	argv := append(ep.Words()[1:], cmdIn.Words()...)
	imageEnv := final.Env()
	environ := func(overrides map[string]string) []string {
		var env []string
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "REIN_") {
				env = append(env, kv)
			}
		}
		for k, v := range imageEnv {
			if o, ok := overrides[k]; ok {
				v = o
			}
			env = append(env, k+"="+strings.ReplaceAll(v, "/data", data))
		}
		for k, v := range overrides {
			if _, ok := imageEnv[k]; !ok {
				env = append(env, k+"="+v)
			}
		}
		return env
	}

	t.Run("refuses without tokens", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c := exec.CommandContext(ctx, bin, argv...)
		c.Dir, c.Env = data, environ(nil)
		out, err := c.CombinedOutput()
		if ctx.Err() != nil {
			t.Fatalf("rein %v with the image's environment and no tokens kept running (it must refuse %s without tokens):\n%s", argv, imageEnv["REIN_ADDR"], out)
		}
		if err == nil || !strings.Contains(string(out), "--tokens") {
			t.Errorf("want a non-zero exit that names --tokens, got %v:\n%s", err, out)
		}
	})

	t.Run("serves with a tokens file", func(t *testing.T) {
		tokens := filepath.Join(dir, "tokens")
		if err := os.WriteFile(tokens, []byte("# TOKEN OWNER\ns3cret alice\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		// 127.0.0.1 stands in for the container's 0.0.0.0: the test only
		// listens on loopback.
		addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
		c := exec.Command(bin, argv...)
		c.Dir, c.Env = data, environ(map[string]string{"REIN_ADDR": addr, "REIN_TOKENS": tokens})
		logs, err := os.Create(filepath.Join(dir, "serve.log"))
		if err != nil {
			t.Fatal(err)
		}
		defer logs.Close()
		c.Stdout, c.Stderr = logs, logs
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- c.Wait() }()
		t.Cleanup(func() {
			select {
			case <-done:
			default:
				_ = c.Process.Kill()
				<-done
			}
		})
		serveLog := func() string { b, _ := os.ReadFile(logs.Name()); return string(b) }

		healthURL := regexp.MustCompile(`http://[^\s]+`).FindString(hc.Args)
		healthURL = strings.NewReplacer("127.0.0.1:8080", addr, "localhost:8080", addr).Replace(healthURL)
		client := &http.Client{Timeout: 2 * time.Second}
		deadline := time.Now().Add(60 * time.Second)
		for {
			// Polling another process: nothing else tells when it listens.
			resp, err := client.Get(healthURL)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			select {
			case err := <-done:
				done <- err
				t.Fatalf("rein exited before serving (%v):\n%s", err, serveLog())
			case <-time.After(50 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatalf("the HEALTHCHECK's %s did not answer 200 within 60 s:\n%s", healthURL, serveLog())
			}
		}
		for _, tc := range []struct {
			token string
			want  int
		}{{"", http.StatusUnauthorized}, {"s3cret", http.StatusOK}} {
			req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/api/sessions", nil)
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("GET /api/sessions with token %q: %d, want %d", tc.token, resp.StatusCode, tc.want)
			}
		}
		if _, err := os.Stat(filepath.Join(data, "rein.db")); err != nil {
			t.Errorf("the database is not in the /data volume: %v", err)
		}
		_ = c.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			done <- err
			if err != nil {
				t.Errorf("rein exited with %v on SIGTERM, want 0:\n%s", err, serveLog())
			}
		case <-time.After(30 * time.Second):
			t.Errorf("rein did not exit within 30 s of SIGTERM:\n%s", serveLog())
		}
	})
}
