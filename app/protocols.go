package app

import (
	"log/slog"
	"strings"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/protocol"
	"github.com/reinhq/rein/protocol/a2a"
	"github.com/reinhq/rein/protocol/agui"
	"github.com/reinhq/rein/protocol/aisdk"
	"github.com/reinhq/rein/protocol/anthropic"
	"github.com/reinhq/rein/protocol/langgraph"
	"github.com/reinhq/rein/sessions"
)

// protocols are the wire protocols a Runtime can serve beside the native
// API (docs/protocols.md), in the order they are listed: each a name for
// Options.Protocols and `rein serve --protocols`, and how its adapter is
// made over the service.
var protocols = []struct {
	name   string
	mounts func(*sessions.Service, *slog.Logger) []protocol.Mount
}{
	{"anthropic", func(svc *sessions.Service, log *slog.Logger) []protocol.Mount {
		return []protocol.Mount{anthropic.Mount(svc, anthropic.Options{Logger: log})}
	}},
	{"a2a", func(svc *sessions.Service, log *slog.Logger) []protocol.Mount {
		return a2a.Mounts(a2a.Options{Service: svc, Logger: log})
	}},
	{"ai-sdk", func(svc *sessions.Service, log *slog.Logger) []protocol.Mount {
		return []protocol.Mount{aisdk.Mount(svc, aisdk.Options{Logger: log})}
	}},
	{"ag-ui", func(svc *sessions.Service, log *slog.Logger) []protocol.Mount {
		return []protocol.Mount{agui.Mount(svc, agui.Options{Logger: log})}
	}},
	{"langgraph", func(svc *sessions.Service, log *slog.Logger) []protocol.Mount {
		return []protocol.Mount{langgraph.Mount(svc, langgraph.Options{Logger: log})}
	}},
}

// Protocols returns the names of every protocol Options.Protocols may
// list, in order: what a nil Options.Protocols mounts.
func Protocols() []string {
	names := make([]string, len(protocols))
	for i, p := range protocols {
		names[i] = p.name
	}
	return names
}

// ParseProtocols reads a comma-separated list of protocol names, as
// `rein serve --protocols` takes it; "none" (or an empty list) is none,
// which is a non-nil empty slice.
func ParseProtocols(list string) ([]string, error) {
	out := []string{}
	for _, n := range strings.Split(list, ",") {
		n = strings.TrimSpace(n)
		if n == "" || n == "none" {
			continue
		}
		if err := knownProtocol(n); err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

func knownProtocol(name string) error {
	for _, p := range protocols {
		if p.name == name {
			return nil
		}
	}
	return rein.Errorf(rein.CodeInvalidArgument, "unknown protocol %q (known: %s, or none)", name, strings.Join(Protocols(), ","))
}

// protocolMounts builds the adapters o names (all of them when o names
// none), over svc.
func protocolMounts(o Options, svc *sessions.Service) ([]protocol.Mount, error) {
	names := o.Protocols
	if names == nil {
		names = Protocols()
	}
	for _, n := range names {
		if err := knownProtocol(n); err != nil {
			return nil, &OptionError{Option: "Protocols", Err: err}
		}
	}
	var out []protocol.Mount
	for _, p := range protocols {
		for _, n := range names {
			if n == p.name {
				out = append(out, p.mounts(svc, o.Logger)...)
				break
			}
		}
	}
	return out, nil
}
