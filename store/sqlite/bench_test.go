package sqlite_test

import (
	"testing"

	"github.com/reinhq/rein/store/storetest"
)

// Durable appends: b.N events, one per AppendEvents call, from 1, 16 and
// 256 goroutines; each to its own session, then all to one session.
func BenchmarkAppend1(b *testing.B)         { storetest.BenchmarkAppend(b, open, 1) }
func BenchmarkAppend16(b *testing.B)        { storetest.BenchmarkAppend(b, open, 16) }
func BenchmarkAppend256(b *testing.B)       { storetest.BenchmarkAppend(b, open, 256) }
func BenchmarkAppendShared16(b *testing.B)  { storetest.BenchmarkAppendShared(b, open, 16) }
func BenchmarkAppendShared256(b *testing.B) { storetest.BenchmarkAppendShared(b, open, 256) }

// Replay of a 100k-event log after cursor 0, pages of 1000.
func BenchmarkReplay100k(b *testing.B) { storetest.BenchmarkReplay(b, open, 100_000, 1000) }

// ListEndedSince of 10 recent ends beside 1k and 100k old ones.
func BenchmarkEndedSince1k(b *testing.B)   { storetest.BenchmarkEndedSince(b, open, 1000, nil) }
func BenchmarkEndedSince100k(b *testing.B) { storetest.BenchmarkEndedSince(b, open, 100_000, nil) }

// The approvals inbox: a page of 100 of 10,000 pending confirmations in
// 1,000 sessions (beside as many answered, and another owner's).
func BenchmarkInbox(b *testing.B) { storetest.BenchmarkInbox(b, open, 1000, 10, nil) }
