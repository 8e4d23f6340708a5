package catalog_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/model"
	"github.com/reinhq/rein/model/catalog"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func env(vars map[string]string) catalog.Env {
	return catalog.Env{Getenv: func(k string) string { return vars[k] }}
}

func TestOpenResolvesEveryForm(t *testing.T) {
	cases := []struct {
		spec string
		vars map[string]string
		name string
	}{
		{"demo", nil, "demo"},
		{"scripted:testdata/hello.yaml", nil, "scripted:testdata/hello.yaml"},
		{"openai:gpt-4o", map[string]string{"OPENAI_API_KEY": "sk-x"}, "openai:gpt-4o"},
		{"openai:qwen2.5", map[string]string{"OPENAI_BASE_URL": "http://127.0.0.1:8000/v1"}, "openai:qwen2.5"},
		{"ollama:llama3.2", nil, "ollama:llama3.2"},
		{"anthropic:claude-sonnet-4-5", map[string]string{"ANTHROPIC_API_KEY": "k"}, "anthropic:claude-sonnet-4-5"},
		{"  demo  ", nil, "demo"},
	}
	for _, c := range cases {
		m, err := catalog.Open(c.spec, env(c.vars))
		if err != nil {
			t.Errorf("Open(%q): %v", c.spec, err)
			continue
		}
		if m.Name() != c.name {
			t.Errorf("Open(%q).Name() = %q, want %q", c.spec, m.Name(), c.name)
		}
	}
}

func TestOpenErrorsSayWhatToFix(t *testing.T) {
	cases := []struct {
		spec    string
		vars    map[string]string
		unknown bool
		want    []string
	}{
		{"gpt-4o", nil, true, []string{"unknown model", `"gpt-4o"`, catalog.Forms}},
		{"mistral:large", nil, true, []string{"unknown model", catalog.Forms}},
		{"", nil, true, []string{catalog.Forms}},
		{"openai:", nil, false, []string{"missing the name"}},
		{"openai:gpt-4o", nil, false, []string{"OPENAI_API_KEY is not set", "OPENAI_BASE_URL", "ollama:gpt-4o"}},
		{"anthropic:claude", map[string]string{"OPENAI_API_KEY": "x"}, false, []string{"ANTHROPIC_API_KEY is not set"}},
		{"scripted:testdata/missing.yaml", nil, false, []string{"missing.yaml"}},
	}
	for _, c := range cases {
		_, err := catalog.Open(c.spec, env(c.vars))
		if err == nil {
			t.Errorf("Open(%q) succeeded", c.spec)
			continue
		}
		if errors.Is(err, model.ErrUnknownModel) != c.unknown {
			t.Errorf("Open(%q) = %v: errors.Is(ErrUnknownModel) = %v", c.spec, err, !c.unknown)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("Open(%q) = %q, lacks %q", c.spec, err, w)
			}
		}
		if !strings.HasPrefix(c.spec, "scripted:") && rein.CodeOf(err) != rein.CodeInvalidArgument {
			t.Errorf("Open(%q) code = %s", c.spec, rein.CodeOf(err))
		}
	}
}

// TestEnvironmentReachesTheProviders checks that the settings the catalog
// reads are the ones the requests use: base URL, key and model name.
func TestEnvironmentReachesTheProviders(t *testing.T) {
	type seen struct{ path, auth, body string }
	got := make(chan seen, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.URL.Path, r.Header.Get("Authorization"), string(b)}
		w.Header().Set("Content-Type", "text/event-stream")
		if strings.HasSuffix(r.URL.Path, "/messages") {
			_, _ = io.WriteString(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":1}}}\n\n"+
				"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":1}}\n\n"+
				"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
			return
		}
		_, _ = io.WriteString(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	}))
	defer srv.Close()
	defer srv.Client().CloseIdleConnections()
	cases := []struct {
		spec string
		vars map[string]string
		want seen
	}{
		{"openai:local-model", map[string]string{"OPENAI_BASE_URL": srv.URL + "/v1", "OPENAI_API_KEY": "sk-1"}, seen{"/v1/chat/completions", "Bearer sk-1", `"model":"local-model"`}},
		{"anthropic:claude-x", map[string]string{"ANTHROPIC_BASE_URL": srv.URL, "ANTHROPIC_API_KEY": "ak-2"}, seen{"/v1/messages", "Bearer ak-2", `"model":"claude-x"`}},
	}
	for _, c := range cases {
		e := env(c.vars)
		e.HTTPClient = srv.Client()
		m, err := catalog.Open(c.spec, e)
		if err != nil {
			t.Fatal(err)
		}
		s, err := m.Stream(context.Background(), &model.Request{Messages: []rein.Message{{Role: rein.RoleUser, Text: "x"}}})
		if err != nil {
			t.Fatalf("%s: %v", c.spec, err)
		}
		for {
			if _, err := s.Recv(); err != nil {
				if !errors.Is(err, io.EOF) {
					t.Errorf("%s: %v", c.spec, err)
				}
				break
			}
		}
		_ = s.Close()
		r := <-got
		if r.path != c.want.path || r.auth != c.want.auth || !strings.Contains(r.body, c.want.body) {
			t.Errorf("%s: request %+v, want %+v", c.spec, r, c.want)
		}
	}
}

// TestOpenErrorSaysItOnce: an unknown name is one message — the name, the
// forms accepted — with no error code in front and no cause repeated after.
func TestOpenErrorSaysItOnce(t *testing.T) {
	_, err := catalog.Open("gpt-4o", env(nil))
	want := `unknown model "gpt-4o": accepted forms are ` + catalog.Forms + ` (for a provider's model say which: openai:gpt-4o, ollama:gpt-4o or anthropic:gpt-4o)`
	if err == nil || err.Error() != want {
		t.Fatalf("Open(gpt-4o) = %v\nwant %s", err, want)
	}
	var re *rein.Error
	if !errors.As(err, &re) || re.Code != rein.CodeInvalidArgument || re.Message != want {
		t.Fatalf("as *rein.Error: %+v", re)
	}
	if !errors.Is(err, rein.ErrInvalidArgument) {
		t.Fatal("not invalid_argument to errors.Is")
	}
	for _, spec := range []string{"gpt-4o", "mistral:large", "openai:gpt-4o", "openai:"} {
		_, err := catalog.Open(spec, env(nil))
		if msg := err.Error(); strings.Contains(msg, "invalid_argument") || strings.Count(msg, "unknown model") > 1 {
			t.Errorf("Open(%q) = %q: repeats itself", spec, msg)
		}
	}
}
