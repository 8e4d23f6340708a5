package model

import "github.com/reinhq/rein"

// Price is what a model's tokens cost, in US dollars per million tokens
// (docs/models.md "Prices").
type Price struct {
	InputPerMTok  float64
	OutputPerMTok float64
}

// Cost is what u's tokens cost at p.
func (p Price) Cost(u rein.Usage) float64 {
	return (float64(u.InputTokens)*p.InputPerMTok + float64(u.OutputTokens)*p.OutputPerMTok) / 1e6
}

// Prices looks up the price of a model by its configured name (an agent's
// model value, e.g. "openai:gpt-4o-mini"); ok is false when it has none.
type Prices func(name string) (p Price, ok bool)
