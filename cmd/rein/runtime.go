package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/app"
	"github.com/reinhq/rein/config"
	"github.com/reinhq/rein/store/backend"
)

// openRuntime assembles Rein from a command's flags (app.Open) and reports
// a field it could not use as the flag that set it: a bad value is a usage
// error naming --flag (or its REIN_* variable), a configuration file's
// problems are FILE:LINE: reason lines. fs nil names the flags plainly.
func openRuntime(ctx context.Context, o app.Options, fs *flagSet) (*app.Runtime, error) {
	rt, err := app.Open(ctx, o)
	if err == nil {
		return rt, nil
	}
	label := func(name string) string {
		if fs == nil {
			return "--" + name
		}
		return fs.label(name)
	}
	var oe *app.OptionError
	if !errors.As(err, &oe) {
		return nil, err
	}
	switch oe.Option {
	case "Store":
		return nil, storeError(label("store"), o.Store, oe.Err)
	case "ConfigFile":
		var cerr config.Errors
		if errors.As(oe.Err, &cerr) {
			// FILE:LINE: reason, one problem a line.
			return nil, &usageError{msg: cerr.Error(), located: true}
		}
		return nil, usagef("%s: %s", label("config"), message(oe.Err))
	case "TLSCertFile":
		return nil, usagef("%s, %s: %s (give a PEM certificate and its PEM key)", label("tls-cert"), label("tls-key"), serverMessage(oe.Err))
	case "CORSOrigins":
		return nil, usagef("%s: %s", label("cors-origin"), serverMessage(oe.Err))
	}
	flag := map[string]string{"Model": "model", "Confirm": "confirm", "Protocols": "protocols"}[oe.Option]
	if flag == "" {
		return nil, err
	}
	return nil, usagef("%s: %s", label(flag), message(oe.Err))
}

// serverMessage is a refusal of server.New without its package prefix.
func serverMessage(err error) string {
	return strings.TrimPrefix(err.Error(), "server: ")
}

// storeError reports a store that did not open, never with its password:
// a bad spec is a usage error; a database that is down is not.
func storeError(flag, spec string, err error) error {
	msg := message(err)
	if spec != "" {
		msg = strings.ReplaceAll(msg, spec, backend.Redact(spec))
	}
	if rein.CodeOf(err) == rein.CodeInvalidArgument {
		return usagef("%s: %s", flag, msg)
	}
	return fmt.Errorf("%s %s: %s", flag, backend.Redact(spec), msg)
}

// confirmList parses a --confirm value: a comma-separated list of tool
// names; "" means none.
func confirmList(v string) []string {
	out := []string{}
	for _, f := range strings.Split(v, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
