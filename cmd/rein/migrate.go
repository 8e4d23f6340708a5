package main

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/reinhq/rein/store/backend"
)

func cmdMigrate(ctx context.Context, args []string, io stdio) int {
	fs := flag.NewFlagSet("rein migrate", flag.ContinueOnError)
	fs.SetOutput(io.err)
	fs.Usage = func() {
		fmt.Fprintln(io.err, "Usage: rein migrate [--store sqlite:PATH|postgres://...]\n\nApplies the store's schema migrations and exits. A database newer than this\nbinary is refused and left unchanged.\n\nFlags:")
		fs.PrintDefaults()
	}
	spec := fs.String("store", "sqlite:./rein.db", "the store to migrate")
	if err := parseFlags(fs, args, io.lookupEnv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(io.err, "rein migrate:", err)
		return exitUsage
	}
	from, to, err := backend.Migrate(ctx, *spec)
	if err != nil {
		fmt.Fprintln(io.err, "rein migrate:", err)
		return exitFailed
	}
	if from == to {
		fmt.Fprintf(io.out, "schema is up to date (version %d)\n", to)
	} else {
		fmt.Fprintf(io.out, "migrated schema from version %d to %d\n", from, to)
	}
	return 0
}
