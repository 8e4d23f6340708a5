package main

import (
	"context"
	"fmt"
	"io"
	"runtime/debug"
)

const versionSynopsis = "rein version"

// cmdVersion is `rein version` (also `rein --version`).
func cmdVersion(_ context.Context, args []string, std stdio) error {
	fs := newFlagSet(std, "version", versionSynopsis, "Prints the version of this binary, the Go version it was built with, and the\nrevision (and its time) of the source it was built from.")
	if err := fs.parse(args, std.lookupEnv); err != nil {
		return err
	}
	if err := fs.noArgs(); err != nil {
		return err
	}
	info, _ := debug.ReadBuildInfo()
	writeVersion(std.out, info)
	return nil
}

// writeVersion prints what a build says about itself. A binary built from
// a checkout has the module version "(devel)", or a pseudo-version since
// Go 1.24; its VCS settings name the commit, and "-dirty" says the tree
// had uncommitted changes.
func writeVersion(w io.Writer, info *debug.BuildInfo) {
	version, goVersion := "(devel)", "unknown"
	settings := map[string]string{}
	if info != nil {
		if v := info.Main.Version; v != "" {
			version = v
		}
		if info.GoVersion != "" {
			goVersion = info.GoVersion
		}
		for _, s := range info.Settings {
			settings[s.Key] = s.Value
		}
	}
	fmt.Fprintf(w, "rein %s\n", version)
	fmt.Fprintf(w, "go:       %s\n", goVersion)
	revision := settings["vcs.revision"]
	if revision == "" {
		revision = "unknown"
	} else if settings["vcs.modified"] == "true" {
		revision += "-dirty"
	}
	fmt.Fprintf(w, "revision: %s\n", revision)
	if t := settings["vcs.time"]; t != "" {
		fmt.Fprintf(w, "time:     %s\n", t)
	}
}

// buildVersion is this binary's module version ("(devel)" from a
// checkout), for the service.version of its traces.
func buildVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" {
		return info.Main.Version
	}
	return "(devel)"
}
