package main

import (
	"encoding/xml"
	"strings"
	"testing"
)

// The chart is well-formed SVG with one marker and one value label per
// point, on two panels.
func TestChart(t *testing.T) {
	by := []Point{{Sessions: 10, Chunks: 20, CPUPerEventUS: 120}, {Sessions: 100, Chunks: 20, CPUPerEventUS: 70}, {Sessions: 1000, Chunks: 20, CPUPerEventUS: 65}}
	ch := []Point{{Sessions: 100, Chunks: 5, CPUPerEventUS: 140}, {Sessions: 100, Chunks: 80, CPUPerEventUS: 55}}
	svg := string(chart(by, ch, 100))
	d := xml.NewDecoder(strings.NewReader(svg))
	circles := 0
	for {
		tok, err := d.Token()
		if err != nil {
			if err.Error() == "EOF" {
				break
			}
			t.Fatalf("not well-formed: %v\n%s", err, svg)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "circle" {
			circles++
		}
	}
	if circles != len(by)+len(ch) {
		t.Fatalf("%d points drawn, want %d", circles, len(by)+len(ch))
	}
	for _, want := range []string{">120<", ">55<", "target 50 µs", "by events per run (100 sessions)"} {
		if !strings.Contains(svg, want) {
			t.Errorf("chart lacks %q", want)
		}
	}
}

func TestInts(t *testing.T) {
	if got, err := ints("10, 100,1000"); err != nil || len(got) != 3 || got[2] != 1000 {
		t.Fatalf("ints: %v %v", got, err)
	}
	for _, bad := range []string{"", "0", "ten", "5,,6"} {
		if _, err := ints(bad); err == nil {
			t.Errorf("ints(%q): no error", bad)
		}
	}
}
