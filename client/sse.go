package client

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strconv"
	"strings"
	"time"
)

// frame is one dispatched Server-Sent Events message.
type frame struct {
	// ID is the id field's value ("" when the frame carried none).
	ID string
	// HasID is true when the frame carried an id field.
	HasID bool
	// Event is the event field ("" means the default type, "message").
	Event string
	// Data is the data lines joined with "\n".
	Data string
}

// errLineTooLong reports a line longer than the parser accepts.
var errLineTooLong = errors.New("rein client: event stream line too long")

// maxLine bounds one line of the stream. An event's data line is its whole
// JSON; the largest events (tool inputs and outputs) stay far below this,
// and the bound keeps a broken server from exhausting memory.
const maxLine = 16 << 20

// sseParser reads frames from an event stream as the WHATWG HTML standard
// ("Server-sent events", "Interpreting an event stream") specifies: lines
// end with CRLF, LF or a lone CR; lines starting with ':' are comments; a
// field name is everything before the first colon, and one space after the
// colon is dropped; data lines accumulate joined by LF; a blank line
// dispatches; an incomplete frame at end of stream is discarded.
type sseParser struct {
	r *bufio.Reader
	// skipLF: the previous line ended with CR, so a following LF belongs
	// to it (CRLF). Deciding this lazily, at the next read, means a frame
	// ended by "\r\r" is dispatched without waiting for another byte.
	skipLF bool
	line   []byte
	// activity is called whenever bytes arrive, including comments; the
	// stream uses it for its idle timeout.
	activity func()
	// retry is the last valid retry field (0: none seen).
	retry time.Duration
	// maxLine bounds one line (maxLine by default; tests lower it).
	maxLine int
	// started is set once the optional byte order mark was checked.
	started bool

	// The frame being built.
	id, event string
	hasID     bool
	data      strings.Builder
	hasData   bool
}

func newSSEParser(r io.Reader, activity func()) *sseParser {
	if activity == nil {
		activity = func() {}
	}
	return &sseParser{r: bufio.NewReaderSize(r, 32<<10), activity: activity, maxLine: maxLine}
}

// readLine returns the next line without its terminator. The slice is
// valid until the next call. It scans the reader's buffer directly because
// bufio has no "read until CR or LF" and a lone CR is a line end.
func (p *sseParser) readLine() ([]byte, error) {
	p.line = p.line[:0]
	for {
		if p.r.Buffered() == 0 {
			// Block until at least one byte (or the end) arrives. A line
			// cut off by the end of the stream is dropped with its frame.
			if _, err := p.r.Peek(1); err != nil {
				return nil, err
			}
		}
		p.activity()
		if !p.started {
			// The standard drops one UTF-8 byte order mark at the start.
			// (Peek(3) waits for 3 bytes; a stream's first write is a
			// whole frame or comment, so that never stalls one.)
			p.started = true
			if b, err := p.r.Peek(3); err == nil && string(b) == "\xEF\xBB\xBF" {
				_, _ = p.r.Discard(3)
			}
			continue
		}
		buf, _ := p.r.Peek(p.r.Buffered())
		if p.skipLF {
			p.skipLF = false
			if buf[0] == '\n' {
				_, _ = p.r.Discard(1)
				continue
			}
		}
		i := bytes.IndexAny(buf, "\r\n")
		if i < 0 {
			if len(p.line)+len(buf) > p.maxLine {
				return nil, errLineTooLong
			}
			p.line = append(p.line, buf...)
			_, _ = p.r.Discard(len(buf))
			continue
		}
		if len(p.line)+i > p.maxLine {
			return nil, errLineTooLong
		}
		p.line = append(p.line, buf[:i]...)
		n := i + 1
		if buf[i] == '\r' {
			switch {
			case i+1 < len(buf) && buf[i+1] == '\n':
				n++
			case i+1 == len(buf):
				p.skipLF = true
			}
		}
		_, _ = p.r.Discard(n)
		return p.line, nil
	}
}

// next returns the next dispatched frame. Frames without data are not
// dispatched (the standard's rule). ID and HasID describe the frame's own
// id field: the stream tracks its position by the seq inside each event's
// JSON, which is authoritative, so the standard's sticky "last event ID
// buffer" is not needed here.
func (p *sseParser) next() (frame, error) {
	for {
		line, err := p.readLine()
		if err != nil {
			p.reset()
			return frame{}, err
		}
		if len(line) == 0 {
			if !p.hasData {
				p.event = ""
				continue
			}
			f := frame{ID: p.id, HasID: p.hasID, Event: p.event, Data: p.data.String()}
			p.event = ""
			p.data.Reset()
			p.hasData = false
			return f, nil
		}
		if line[0] == ':' {
			continue
		}
		field, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			field, value = line[:i], line[i+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		switch string(field) {
		case "event":
			p.event = string(value)
		case "data":
			if p.hasData {
				p.data.WriteByte('\n')
			}
			p.data.Write(value)
			p.hasData = true
		case "id":
			if bytes.IndexByte(value, 0) < 0 {
				p.id, p.hasID = string(value), true
			}
		case "retry":
			if ms, err := strconv.ParseUint(string(value), 10, 32); err == nil {
				p.retry = time.Duration(ms) * time.Millisecond
			}
		}
	}
}

// reset drops a frame left incomplete by the end of its connection.
func (p *sseParser) reset() {
	p.event = ""
	p.data.Reset()
	p.hasData = false
}
