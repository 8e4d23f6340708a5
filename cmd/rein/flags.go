package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// flagSet is a command's flags: the standard library's flag set, plus what
// every rein command shares — each flag also read from its REIN_*
// variable, errors that name where a bad value came from (the flag or its
// variable) and what a valid one looks like, and help printed on stdout
// with the flags spelled --name.
type flagSet struct {
	*flag.FlagSet
	name     string // the command, "send"
	synopsis string // its usage line, "rein send [flags] TEXT"
	about    string // what it does, under the usage line of -h
	out      io.Writer
	// env maps each flag set from the environment to its variable.
	env map[string]string
	// bad is the first value a flag refused while parsing.
	bad error
	// interleave lets flags follow the arguments (rein stop RUN_ID
	// --interrupt), for commands whose arguments are ids; a message
	// (rein send TEXT) keeps every word after the first one as text.
	interleave bool
	// args are the arguments left once the flags are parsed.
	args []string
}

func newFlagSet(std stdio, name, synopsis, about string) *flagSet {
	fs := flag.NewFlagSet("rein "+name, flag.ContinueOnError)
	// Parse errors and help are reported by parse and mainWith, never by
	// the flag package.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &flagSet{FlagSet: fs, name: name, synopsis: synopsis, about: about, out: std.out, env: map[string]string{}}
}

// envName is the environment variable of a flag.
func envName(flag string) string {
	return "REIN_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// parse parses args, then fills every flag not given on the command line
// from its REIN_* variable (a flag wins over its variable). -h prints the
// help and returns errHelpShown; anything wrong is a *usageError.
func (f *flagSet) parse(args []string, lookupEnv func(string) (string, bool)) error {
	restore := f.checkValues()
	defer restore()
	if err := f.parseArgs(args); err != nil {
		switch {
		case errors.Is(err, flag.ErrHelp):
			restore()
			f.help(f.out)
			return errHelpShown
		case f.bad != nil:
			return f.bad
		}
		return f.syntaxError(err)
	}
	given := map[string]bool{}
	f.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	var names []string
	f.VisitAll(func(fl *flag.Flag) { names = append(names, fl.Name) })
	for _, name := range names {
		if given[name] {
			continue
		}
		v, ok := lookupEnv(envName(name))
		if !ok {
			continue
		}
		f.env[name] = envName(name)
		if err := f.Set(name, v); err != nil {
			return f.bad
		}
	}
	return nil
}

// parseArgs parses the command line into the flags and f.args.
func (f *flagSet) parseArgs(args []string) error {
	for {
		if err := f.Parse(args); err != nil {
			return err
		}
		rest := f.Args()
		if !f.interleave || len(rest) == 0 {
			f.args = append(f.args, rest...)
			return nil
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			// Everything after "--" is an argument.
			f.args = append(f.args, rest...)
			return nil
		}
		f.args = append(f.args, rest[0])
		args = rest[1:]
	}
}

// origin names where a flag's value came from, with the value: --addr
// "bogus", or REIN_ADDR="bogus" (--addr) when the environment set it.
func (f *flagSet) origin(name, value string) string {
	if v, ok := f.env[name]; ok {
		return fmt.Sprintf("%s=%q (--%s)", v, value, name)
	}
	return fmt.Sprintf("--%s %q", name, value)
}

// invalid is a usage error about a flag's current value; reason says what
// a valid one looks like.
func (f *flagSet) invalid(name, format string, args ...any) error {
	return usagef("%s: %s", f.origin(name, f.Lookup(name).Value.String()), fmt.Sprintf(format, args...))
}

// label names a flag without its value: --store, or REIN_STORE (--store)
// when the environment set it; for errors that quote the value themselves.
func (f *flagSet) label(name string) string {
	if v, ok := f.env[name]; ok {
		return v + " (--" + name + ")"
	}
	return "--" + name
}

// noArgs refuses positional arguments.
func (f *flagSet) noArgs() error {
	if len(f.args) > 0 {
		return usagef("unexpected argument %q: rein %s takes flags only", f.args[0], f.name)
	}
	return nil
}

// checkValues wraps every flag's value for the duration of a parse, so
// that a value refused by its Set is reported with its origin and a hint
// of what is valid; the returned function puts the values back.
func (f *flagSet) checkValues() (restore func()) {
	orig := map[string]flag.Value{}
	f.VisitAll(func(fl *flag.Flag) {
		orig[fl.Name] = fl.Value
		cv := checkedValue{Value: fl.Value, f: f, name: fl.Name}
		if b, ok := fl.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			fl.Value = checkedBool{cv}
		} else {
			fl.Value = cv
		}
	})
	return func() {
		f.VisitAll(func(fl *flag.Flag) { fl.Value = orig[fl.Name] })
	}
}

type checkedValue struct {
	flag.Value
	f    *flagSet
	name string
}

func (c checkedValue) Set(v string) error {
	err := c.Value.Set(v)
	if err != nil && c.f.bad == nil {
		c.f.bad = usagef("%s: %s", c.f.origin(c.name, v), valueHint(c.Value, err))
	}
	return err
}

type checkedBool struct{ checkedValue }

func (checkedBool) IsBoolFlag() bool { return true }

// valueHint says why a value was refused and what a valid one looks like.
func valueHint(v flag.Value, err error) string {
	var ue *usageError
	if errors.As(err, &ue) {
		return ue.msg
	}
	g, ok := v.(flag.Getter)
	if !ok {
		return err.Error()
	}
	switch g.Get().(type) {
	case time.Duration:
		return "not a duration: use one such as 30s, 2m or 1h30m"
	case int, int64, uint, uint64:
		return "not a whole number: use one such as 3"
	case float64:
		return "not a number: use one such as 2.5"
	case bool:
		return "use true or false"
	}
	return err.Error()
}

var flagSyntax = regexp.MustCompile(`^(flag provided but not defined|flag needs an argument|bad flag syntax): (.*)$`)

// syntaxError rewrites the flag package's complaints about the command
// line itself.
func (f *flagSet) syntaxError(err error) error {
	m := flagSyntax.FindStringSubmatch(err.Error())
	if m == nil {
		return usagef("%v", err)
	}
	name := strings.TrimLeft(m[2], "-")
	switch m[1] {
	case "flag provided but not defined":
		return usagef("unknown flag --%s (rein %s has %s)", name, f.name, strings.Join(f.flagNames(), ", "))
	case "flag needs an argument":
		return usagef("--%s needs a value, e.g. --%s %s", name, name, f.example(name))
	}
	return usagef("bad flag syntax %q: write --name value or --name=value", m[2])
}

func (f *flagSet) flagNames() []string {
	var names []string
	f.VisitAll(func(fl *flag.Flag) { names = append(names, "--"+fl.Name) })
	return names
}

// example is a plausible value for a flag: its default, or its kind.
func (f *flagSet) example(name string) string {
	fl := f.Lookup(name)
	if fl == nil {
		return "VALUE"
	}
	if !zeroDefault(fl.DefValue) {
		return fl.DefValue
	}
	kind, _ := flag.UnquoteUsage(fl)
	switch kind {
	case "duration":
		return "30s"
	case "int":
		return "3"
	case "", "value", "string":
		return strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
	}
	return strings.ToUpper(kind)
}

// zeroDefault reports whether a default is not worth showing.
func zeroDefault(v string) bool {
	return v == "" || v == "0" || v == "0s" || v == "false"
}

// help prints the command's usage, what it does and its flags, each with
// its default and its variable.
func (f *flagSet) help(w io.Writer) {
	fmt.Fprintf(w, "Usage: %s\n\n%s\n", f.synopsis, strings.TrimSpace(f.about))
	var fls []*flag.Flag
	f.VisitAll(func(fl *flag.Flag) { fls = append(fls, fl) })
	if len(fls) == 0 {
		return
	}
	sort.Slice(fls, func(i, j int) bool { return fls[i].Name < fls[j].Name })
	fmt.Fprintln(w, "\nFlags (each can also be set by its variable; a flag wins over its variable):")
	for _, fl := range fls {
		kind, usage := flag.UnquoteUsage(fl)
		head := "  --" + fl.Name
		if kind != "" {
			head += " " + kind
		}
		fmt.Fprintln(w, head)
		extra := envName(fl.Name)
		if !zeroDefault(fl.DefValue) {
			extra = "default " + strconv.Quote(fl.DefValue) + "; " + extra
		}
		fmt.Fprintf(w, "    \t%s (%s)\n", strings.ReplaceAll(usage, "\n", "\n    \t"), extra)
	}
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

// confirm returns the --confirm list, or nil when the flag was not given
// (an empty list, not nil, when it was given empty).
func (o *optionalString) confirm() []string {
	if !o.set {
		return nil
	}
	return confirmList(o.val)
}

// choice is a flag that takes one of a few words.
type choice struct {
	val     string
	choices []string
}

func newChoice(def string, choices ...string) *choice {
	return &choice{val: def, choices: choices}
}

func (c *choice) String() string {
	if c == nil {
		return ""
	}
	return c.val
}

func (c *choice) Set(v string) error {
	for _, ch := range c.choices {
		if v == ch {
			c.val = v
			return nil
		}
	}
	return usagef("use %s", orList(c.choices))
}

// orList joins words as "a, b or c".
func orList(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}
