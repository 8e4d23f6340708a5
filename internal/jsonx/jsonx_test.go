package jsonx

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// validCases are the inputs where a validator is most easily wrong; each
// is checked against encoding/json's verdict, not a hand-written one.
var validCases = []string{
	``, ` `, `{}`, `[]`, ` {} `, `{`, `}`, `[`, `]`, `{]`, `[}`, `[1,]`, `[,1]`, `{"a":1,}`, `{,"a":1}`,
	`{"a"}`, `{"a":}`, `{"a" 1}`, `{1:2}`, `{"a":1 "b":2}`, `[1 2]`, `{"a":{"b":[1,{"c":null}]}}`,
	`true`, `false`, `null`, `tru`, `nul`, `nulll`, `True`, `[true,false,null]`,
	`0`, `-0`, `01`, `-01`, `1.`, `.1`, `1.5`, `-1.5e10`, `1e`, `1e+`, `1e-5`, `1E5`, `-`, `--1`, `+1`, `1.2.3`, `0x10`, `1 2`,
	`""`, `"a"`, `"\""`, `"\\"`, `"\/"`, `"\b\f\n\r\t"`, `"\u00e9"`, `"\u00E9"`, `"\u00g9"`, `"\u00e"`, `"\x"`, `"\`, `"abc`,
	"\"a\x01b\"", "\"a\x7fb\"", "\"\xff\xfe\"", "\"\u2028\"", "{\"a\":1}\n", "\t[1]\r\n", `"a"x`, `{}{}`, `[][]`,
	strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth),
	strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1),
	strings.Repeat(`{"a":`, maxDepth) + "1" + strings.Repeat("}", maxDepth),
	strings.Repeat(`{"a":`, maxDepth) + "{}" + strings.Repeat("}", maxDepth),
	strings.Repeat("[", maxDepth-1) + "{}" + strings.Repeat("]", maxDepth-1),
}

func TestValidAgreesWithEncodingJSON(t *testing.T) {
	for _, c := range validCases {
		if got, want := Valid([]byte(c)), json.Valid([]byte(c)); got != want {
			t.Errorf("Valid(%.40q) = %v, encoding/json says %v", c, got, want)
		}
	}
}

func FuzzValid(f *testing.F) {
	for _, c := range validCases {
		if len(c) < 200 {
			f.Add([]byte(c))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := Valid(b), json.Valid(b); got != want {
			t.Fatalf("Valid(%q) = %v, encoding/json says %v", b, got, want)
		}
	})
}

var stringCases = []string{
	"", "plain", `quote " and \ backslash`, "<script>&</script>", "\b\f\n\r\t", "\x00\x01\x1f\x7f",
	"é ü 日本", "\u2028\u2029", "bad \xff utf8 \xe2\x82", "\xed\xa0\x80", "a\u2027b\u202ac", "emoji 😀",
}

func TestAppendStringAgreesWithEncodingJSON(t *testing.T) {
	for _, s := range stringCases {
		checkString(t, s)
	}
}

func FuzzAppendString(f *testing.F) {
	for _, s := range stringCases {
		f.Add(s)
	}
	f.Fuzz(checkString)
}

func checkString(t *testing.T, s string) {
	want, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	got := AppendString([]byte("x"), s)
	if !bytes.Equal(got, append([]byte("x"), want...)) {
		t.Fatalf("AppendString(%q)\n got x%s\nwant x%s", s, got[1:], want)
	}
}

var benchPayload = []byte(`{"run_id":"run_01KB0000000000000000000000","step":1,"text":"token token token \"quoted\" text"}`)

func BenchmarkValid(b *testing.B) {
	b.Run("jsonx", func(b *testing.B) {
		b.SetBytes(int64(len(benchPayload)))
		for b.Loop() {
			if !Valid(benchPayload) {
				b.Fatal("invalid")
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.SetBytes(int64(len(benchPayload)))
		for b.Loop() {
			if !json.Valid(benchPayload) {
				b.Fatal("invalid")
			}
		}
	})
}

func BenchmarkAppendString(b *testing.B) {
	s := "token token token token token token token token token token "
	b.Run("jsonx", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			buf = AppendString(buf[:0], s)
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(s); err != nil {
				b.Fatal(err)
			}
		}
	})
}
