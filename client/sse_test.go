package client

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

// parseAll returns every frame of src, read through wrap, and the error
// that ended it.
func parseAll(src string, wrap func(io.Reader) io.Reader) ([]frame, time.Duration, error) {
	p := newSSEParser(wrap(strings.NewReader(src)), nil)
	var out []frame
	for {
		f, err := p.next()
		if err != nil {
			return out, p.retry, err
		}
		out = append(out, f)
	}
}

func TestParserFraming(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 100<<10) // longer than the read buffer
	tests := []struct {
		name  string
		in    string
		want  []frame
		retry time.Duration
	}{
		{
			name: "LF",
			in:   "id: 1\nevent: user.message\ndata: {\"a\":1}\n\n",
			want: []frame{{ID: "1", HasID: true, Event: "user.message", Data: `{"a":1}`}},
		},
		{
			name: "CRLF",
			in:   "id: 1\r\nevent: t\r\ndata: x\r\n\r\nid: 2\r\ndata: y\r\n\r\n",
			want: []frame{{ID: "1", HasID: true, Event: "t", Data: "x"}, {ID: "2", HasID: true, Data: "y"}},
		},
		{
			name: "lone CR",
			in:   "id: 1\revent: t\rdata: x\r\rdata: y\r\r",
			want: []frame{{ID: "1", HasID: true, Event: "t", Data: "x"}, {ID: "1", HasID: true, Data: "y"}},
		},
		{
			name: "mixed terminators",
			in:   "data: a\r\ndata: b\rdata: c\n\r\n",
			want: []frame{{Data: "a\nb\nc"}},
		},
		{
			name: "multi-line data",
			in:   "data: first\ndata: second\ndata:\ndata: fourth\n\n",
			want: []frame{{Data: "first\nsecond\n\nfourth"}},
		},
		{
			name: "comments and heartbeats are not frames",
			in:   ": keepalive\n\n:\n: another\ndata: x\n: inside a frame\n\n: after\n\n",
			want: []frame{{Data: "x"}},
		},
		{
			name: "only one space after the colon is dropped",
			in:   "data:nospace\ndata:  two spaces\n\n",
			want: []frame{{Data: "nospace\n two spaces"}},
		},
		{
			name: "a field without a colon has an empty value",
			in:   "data\ndata\n\n",
			want: []frame{{Data: "\n"}},
		},
		{
			name: "colons after the first belong to the value",
			in:   "data: {\"t\":\"12:00:01\"}\n\n",
			want: []frame{{Data: `{"t":"12:00:01"}`}},
		},
		{
			name: "unknown fields are ignored",
			in:   "foo: bar\ndata: x\nDATA: y\n\n",
			want: []frame{{Data: "x"}},
		},
		{
			name: "an id with NUL is ignored",
			in:   "id: 7\ndata: a\n\nid: 8\x009\ndata: b\n\n",
			want: []frame{{ID: "7", HasID: true, Data: "a"}, {ID: "7", HasID: true, Data: "b"}},
		},
		{
			name: "a frame without data is not dispatched and its type does not leak",
			in:   "event: lonely\nid: 3\n\ndata: x\n\n",
			want: []frame{{ID: "3", HasID: true, Data: "x"}},
		},
		{
			name: "an incomplete frame at the end is discarded",
			in:   "data: whole\n\ndata: cut off\n",
			want: []frame{{Data: "whole"}},
		},
		{
			name: "an incomplete line at the end is discarded",
			in:   "data: whole\n\ndata: cut",
			want: []frame{{Data: "whole"}},
		},
		{
			name:  "retry in milliseconds; invalid values ignored",
			in:    "retry: 1500\nretry: x\nretry: -1\nretry: 1.5\ndata: x\n\n",
			want:  []frame{{Data: "x"}},
			retry: 1500 * time.Millisecond,
		},
		{
			name: "a byte order mark at the start is dropped",
			in:   "\xEF\xBB\xBFdata: x\n\n",
			want: []frame{{Data: "x"}},
		},
		{
			name: "a line longer than the read buffer",
			in:   "data: " + long + "\n\n",
			want: []frame{{Data: long}},
		},
		{
			name: "empty stream",
			in:   "",
		},
	}
	readers := map[string]func(io.Reader) io.Reader{
		"whole":    func(r io.Reader) io.Reader { return r },
		"one byte": iotest.OneByteReader,
		"half":     iotest.HalfReader,
	}
	for _, tc := range tests {
		for rname, wrap := range readers {
			t.Run(tc.name+"/"+rname, func(t *testing.T) {
				t.Parallel()
				got, retry, err := parseAll(tc.in, wrap)
				if !errors.Is(err, io.EOF) {
					t.Fatalf("ended with %v, want EOF", err)
				}
				if len(got) != len(tc.want) {
					t.Fatalf("got %d frames %+v, want %d %+v", len(got), got, len(tc.want), tc.want)
				}
				for i := range got {
					if got[i] != tc.want[i] {
						t.Errorf("frame %d = %+v, want %+v", i, got[i], tc.want[i])
					}
				}
				if retry != tc.retry {
					t.Errorf("retry = %v, want %v", retry, tc.retry)
				}
			})
		}
	}
}

// A frame ended by a lone CR must be dispatched at once, without waiting
// for a byte that might be the LF of a CRLF.
func TestParserLoneCRDoesNotWaitForMore(t *testing.T) {
	t.Parallel()
	pr, pw := io.Pipe()
	defer pr.Close()
	p := newSSEParser(pr, nil)
	go func() { _, _ = pw.Write([]byte("data: x\r\r")) }()
	done := make(chan frame, 1)
	go func() {
		f, _ := p.next()
		done <- f
	}()
	select {
	case f := <-done:
		if f.Data != "x" {
			t.Fatalf("frame = %+v", f)
		}
	case <-time.After(10 * time.Second):
		pw.Close()
		<-done
		t.Fatal("the frame was not dispatched until more bytes arrived")
	}
	// The LF that may follow belongs to the CR and is not a blank line.
	go func() { _, _ = pw.Write([]byte("\ndata: y\n\n")); pw.Close() }()
	f, err := p.next()
	if err != nil || f.Data != "y" {
		t.Fatalf("next = %+v, %v", f, err)
	}
}

func TestParserLineTooLong(t *testing.T) {
	t.Parallel()
	p := newSSEParser(strings.NewReader("data: "+strings.Repeat("x", 1000)+"\n\n"), nil)
	p.maxLine = 100
	if _, err := p.next(); !errors.Is(err, errLineTooLong) {
		t.Fatalf("err = %v, want errLineTooLong", err)
	}
}

func TestParserReportsActivityForComments(t *testing.T) {
	t.Parallel()
	n := 0
	p := newSSEParser(strings.NewReader(": keepalive\n: keepalive\n"), func() { n++ })
	if _, err := p.next(); !errors.Is(err, io.EOF) {
		t.Fatalf("err = %v", err)
	}
	if n == 0 {
		t.Fatal("comments did not count as activity")
	}
}

func BenchmarkParser(b *testing.B) {
	fr := "id: 12345\nevent: agent.message.delta\ndata: {\"seq\":12345,\"id\":\"evt_01J0000000000000000000000\",\"session_id\":\"ses_01J0000000000000000000000\",\"run_id\":\"run_01J0000000000000000000000\",\"type\":\"agent.message.delta\",\"payload\":{\"run_id\":\"run_01J0000000000000000000000\",\"step\":1,\"text\":\"hello world \"},\"created_at\":\"2025-01-01T00:00:00.123456Z\"}\n\n"
	src := strings.Repeat(fr, 1000)
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		p := newSSEParser(strings.NewReader(src), nil)
		for {
			if _, err := p.next(); err != nil {
				break
			}
		}
	}
}
