package app

import (
	"context"
	"errors"
	"fmt"

	"github.com/reinhq/rein/config"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/webhook"
)

// hookRunner runs the webhook dispatcher beside the service: its own
// goroutine, its own context, so that no run ever waits for a webhook.
type hookRunner struct {
	d      *webhook.Dispatcher
	cancel context.CancelFunc
	done   chan struct{}
}

// newHooks builds the dispatcher of the configuration's webhooks; nil
// when there are none. A secret_env that names an unset or empty variable
// is the configuration's mistake, reported at the webhook's line.
func newHooks(ctx context.Context, o Options, cfg *config.Config, st store.Store, instance string) (*hookRunner, error) {
	if len(cfg.Webhooks) == 0 {
		return nil, nil
	}
	b, ok := st.(webhook.Backend)
	if !ok {
		return nil, &OptionError{Option: "Store", Err: errors.New("this store keeps no webhook outbox")}
	}
	dests := make([]webhook.Destination, 0, len(cfg.Webhooks))
	for _, w := range cfg.Webhooks {
		d := webhook.Destination{URL: w.URL, Events: w.Events, RetryFor: w.RetryFor}
		if w.SecretEnv != "" {
			v, _ := o.LookupEnv(w.SecretEnv)
			if v == "" {
				return nil, &OptionError{Option: "ConfigFile", Err: config.Errors{&config.Error{File: configName(o), Line: w.Line,
					Reason: fmt.Sprintf("webhooks: secret_env %s is not set (or empty): the webhook's secret must be in it", w.SecretEnv)}}}
			}
			d.Secret = []byte(v)
		}
		dests = append(dests, d)
	}
	d, err := webhook.New(webhook.Options{Store: b, Destinations: dests, Instance: instance, Logger: o.Logger})
	if err != nil {
		return nil, &OptionError{Option: "ConfigFile", Err: err}
	}
	// Before any run is admitted: the webhooks receive every event from
	// here on.
	if err := d.Register(ctx); err != nil {
		return nil, fmt.Errorf("app: %w", err)
	}
	return &hookRunner{d: d}, nil
}

// start runs the dispatcher until stop. Nil-safe.
func (h *hookRunner) start() {
	if h == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel, h.done = cancel, make(chan struct{})
	go func() {
		defer close(h.done)
		_ = h.d.Run(ctx)
	}()
}

// stop ends the dispatcher and waits for it: attempts in flight are cut,
// and their deliveries are made again later (same delivery id). Nil-safe,
// and harmless when start was never called.
func (h *hookRunner) stop() {
	if h == nil || h.cancel == nil {
		return
	}
	h.cancel()
	<-h.done
}

// outboxOf is st's outbox, nil when it keeps none.
func outboxOf(st store.Store) store.Outbox {
	ob, _ := st.(store.Outbox)
	return ob
}
