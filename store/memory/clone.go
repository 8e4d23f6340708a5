package memory

import (
	"bytes"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

// Copies on the way in and out: a caller must never reach stored state
// through a pointer or slice it holds.

func cloneBytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	return bytes.Clone(b)
}

func cloneMessage(m rein.Message) rein.Message {
	if m.ToolCalls != nil {
		calls := make([]rein.ToolCall, len(m.ToolCalls))
		for i, c := range m.ToolCalls {
			c.Input = cloneBytes(c.Input)
			calls[i] = c
		}
		m.ToolCalls = calls
	}
	if m.Hint != nil {
		h := *m.Hint
		m.Hint = &h
	}
	return m
}

func cloneRun(r *store.RunRecord) *store.RunRecord { c := *r; return &c }

func cloneSupplement(s *store.Supplement) *store.Supplement { c := *s; return &c }

func cloneConfirmation(c *store.Confirmation) *store.Confirmation {
	out := *c
	out.Input = cloneBytes(c.Input)
	return &out
}

func cloneLease(l *store.Lease) *store.Lease { c := *l; return &c }
