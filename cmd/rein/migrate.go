package main

import (
	"context"
	"fmt"

	"github.com/reinhq/rein/store/backend"
)

const migrateSynopsis = "rein migrate [--store sqlite:PATH|postgres://...]"

func cmdMigrate(ctx context.Context, args []string, std stdio) error {
	fs := newFlagSet(std, "migrate", migrateSynopsis, "Applies the store's schema migrations and exits. A database newer than this\nbinary is refused and left unchanged.")
	spec := fs.String("store", "sqlite:./rein.db", "the `STORE` to migrate: sqlite:PATH or postgres://...")
	if err := fs.parse(args, std.lookupEnv); err != nil {
		return err
	}
	if err := fs.noArgs(); err != nil {
		return err
	}
	from, to, err := backend.Migrate(ctx, *spec)
	if err != nil {
		return storeError(fs.label("store"), *spec, err)
	}
	if from == to {
		fmt.Fprintf(std.out, "schema is up to date (version %d)\n", to)
	} else {
		fmt.Fprintf(std.out, "migrated schema from version %d to %d\n", from, to)
	}
	return nil
}
