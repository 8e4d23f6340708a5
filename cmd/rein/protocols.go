package main

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/reinhq/rein/protocol"
	"github.com/reinhq/rein/protocol/aisdk"
	"github.com/reinhq/rein/protocol/anthropic"
	"github.com/reinhq/rein/sessions"
)

// knownProtocols are the wire protocols `rein serve --protocols` can mount
// beside the native API (docs/protocols.md), in the order they are listed.
var knownProtocols = []struct {
	name  string
	mount func(*sessions.Service, *slog.Logger) protocol.Mount
}{
	{"anthropic", func(svc *sessions.Service, log *slog.Logger) protocol.Mount {
		return anthropic.Mount(svc, anthropic.Options{Logger: log})
	}},
	{"ai-sdk", func(svc *sessions.Service, log *slog.Logger) protocol.Mount {
		return aisdk.Mount(svc, aisdk.Options{Logger: log})
	}},
}

// defaultProtocols is --protocols' default: every known protocol.
func defaultProtocols() string {
	names := make([]string, len(knownProtocols))
	for i, p := range knownProtocols {
		names[i] = p.name
	}
	return strings.Join(names, ",")
}

// parseProtocols checks a --protocols list: comma-separated known names;
// "none" (or empty) mounts none.
func parseProtocols(list string) ([]string, error) {
	var out []string
	for _, n := range strings.Split(list, ",") {
		n = strings.TrimSpace(n)
		if n == "" || n == "none" {
			continue
		}
		known := false
		for _, p := range knownProtocols {
			known = known || p.name == n
		}
		if !known {
			return nil, fmt.Errorf("unknown protocol %q (known: %s, or none)", n, defaultProtocols())
		}
		out = append(out, n)
	}
	return out, nil
}

// protocolMounts builds the adapters named, over svc.
func protocolMounts(names []string, svc *sessions.Service, log *slog.Logger) []protocol.Mount {
	var out []protocol.Mount
	for _, p := range knownProtocols {
		for _, n := range names {
			if n == p.name {
				out = append(out, p.mount(svc, log))
				break
			}
		}
	}
	return out
}

// protocolNames is the --protocols list (checked by parse).
func (f *serveFlags) protocolNames() []string {
	names, _ := parseProtocols(*f.protocols)
	return names
}
