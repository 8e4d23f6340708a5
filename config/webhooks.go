package config

import (
	"fmt"
	"path"
	"time"

	"go.yaml.in/yaml/v3"
)

// DefaultRetryFor is how long a webhook's delivery is retried when the
// entry names no retry_for.
const DefaultRetryFor = 24 * time.Hour

var webhookKeys = []string{"url", "events", "secret_env", "retry_for"}

// Webhook is one entry of `webhooks:` (docs/webhooks.md).
type Webhook struct {
	// URL is the http or https URL deliveries are POSTed to.
	URL string
	// Events are event types or path.Match globs ("agent.*"); nil means
	// every event.
	Events []string
	// SecretEnv names the environment variable holding the signing
	// secret; "" sends no signature.
	SecretEnv string
	// RetryFor bounds a delivery's retries from its first attempt.
	RetryFor time.Duration
	// Line is the line of the entry in the file.
	Line int
}

// webhooks reads the `webhooks:` list.
func (p *parser) webhooks(e *entry) []*Webhook {
	n := e.value
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, "webhooks: must be a list of {url, events, secret_env, retry_for}, got %s", describe(n))
		return nil
	}
	var out []*Webhook
	seen := map[string]int{}
	for i, item := range n.Content {
		item = resolve(item)
		at := fmt.Sprintf("webhooks[%d]", i)
		fields, ok := p.mapping(item, at, "", webhookKeys)
		if !ok {
			continue
		}
		w := &Webhook{Line: item.Line, RetryFor: DefaultRetryFor}
		var urlField *entry
		for j := range fields {
			f := &fields[j]
			if isNull(f.value) {
				continue
			}
			switch f.name {
			case "url":
				urlField = f
				w.URL = p.url(f)
			case "events":
				items, nodes := p.strList(f.value, f.path, "event types or globs")
				for k, s := range items {
					if s == "" {
						p.errorf(nodes[k], "%s[%d]: empty event pattern", f.path, k)
						continue
					}
					if _, err := path.Match(s, ""); err != nil {
						p.errorf(nodes[k], "%s[%d]: %q is not a valid glob: %v", f.path, k, s, err)
						continue
					}
					w.Events = append(w.Events, s)
				}
				if w.Events == nil {
					w.Events = []string{}
				}
			case "secret_env":
				if s, ok := p.str(f.value, f.path); ok {
					if why := checkEnvName(s); why != "" {
						p.errorf(f.value, "%s: %s", f.path, why)
					} else {
						w.SecretEnv = s
					}
				}
			case "retry_for":
				if s, ok := p.str(f.value, f.path); ok {
					d, err := time.ParseDuration(s)
					switch {
					case err != nil:
						p.errorf(f.value, "%s: %q is not a duration (e.g. 30s, 24h)", f.path, s)
					case d <= 0:
						p.errorf(f.value, "%s: %q must be longer than zero", f.path, s)
					default:
						w.RetryFor = d
					}
				}
			}
		}
		if urlField == nil {
			p.errorf(item, "%s: needs url", at)
			continue
		}
		if w.URL == "" {
			continue // reported by url
		}
		if line, dup := seen[w.URL]; dup {
			p.errorf(urlField.value, "%s.url: %q is already a webhook (line %d): one entry per URL", at, w.URL, line)
			continue
		}
		seen[w.URL] = urlField.value.Line
		out = append(out, w)
	}
	return out
}
