package main

import (
	"flag"
	"fmt"
)

// parseFlags parses args into fs, then fills every flag not given on the
// command line from its REIN_* environment variable (docs/cli.md: a flag wins
// over its variable). It returns an error naming a bad variable.
func parseFlags(fs *flag.FlagSet, args []string, lookupEnv func(string) (string, bool)) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] || err != nil {
			return
		}
		name := envName(f.Name)
		v, ok := lookupEnv(name)
		if !ok {
			return
		}
		if e := fs.Set(f.Name, v); e != nil {
			err = fmt.Errorf("%s=%q (--%s): %v", name, v, f.Name, e)
		}
	})
	return err
}

// optionalString is a string flag that knows whether it was given, so that
// "--confirm ”" (given, empty: confirm nothing) differs from no --confirm
// (the default set).
type optionalString struct {
	set bool
	val string
}

func (o *optionalString) String() string { return o.val }

func (o *optionalString) Set(v string) error {
	o.set, o.val = true, v
	return nil
}

// confirm returns the --confirm list, or nil when the flag was not given.
func (o *optionalString) confirm() *[]string {
	if !o.set {
		return nil
	}
	return confirmList(o.val)
}
