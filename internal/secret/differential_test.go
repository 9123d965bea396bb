package secret

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzMaskersAgree proves the two masking implementations equal: the
// streaming JSON masker (masker.rewrite, which MarshalMasked and so every
// API response uses) gives, byte for byte, the encoding of what the value
// masker (masker.mask, which Mask and so events, logs and audit use) makes
// of the same document — for any document, any pair of registered values,
// token patterns, and a set that has overflowed or not. The seed corpus is
// in testdata/fuzz/FuzzMaskersAgree.
func FuzzMaskersAgree(f *testing.F) {
	f.Add(`{"b":"x-registered-1 and sst_0123456789abcdefABCDEF","a":[1,2.50,-0,1e3,null,true],"token":"t"}`, "x-registered-1", "another-value", false)
	f.Add(`{"a":1,"\u0061":2,"password":null,"api_key":{"deep":"v"},"zone":"a<b>&c \u2028 é \ud83d\ude00"}`, "é \u2028", "zone", false)
	f.Add(`[{"PassPhrase":"p"},"sbt_aaaaaaaaaaaaaaaaaaaa","sbt_short","\"quoted secret-value\""]`, `"quoted secret-value"`, "", false)
	f.Add(`{"k":"v","n":[{"m":"text"}],"e":""}`, "", "", true)
	f.Fuzz(func(t *testing.T, doc, v1, v2 string, redact bool) {
		if !json.Valid([]byte(doc)) {
			return
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, []byte(doc)); err != nil {
			return
		}
		set := NewSet()
		set.Add(v1)
		set.Add(v2)
		m := masker{values: set.snapshot(), redact: redact}

		var v any
		if err := unmarshalNumber(compact.Bytes(), &v); err != nil {
			t.Fatalf("valid JSON does not decode: %v", err)
		}
		want, err := encodeNoHTML(m.mask(v))
		if err != nil {
			t.Fatalf("value masker: %v", err)
		}
		// A document as given (compacted), and one as json.Marshal writes
		// it, which is what the API hands the streaming masker.
		marshalled, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		for _, in := range [][]byte{compact.Bytes(), marshalled} {
			got, err := m.rewrite(in)
			if err != nil {
				t.Fatalf("streaming masker on %s: %v", in, err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("maskers disagree on %s with %q, %q (redact %v):\nstreaming %s\nvalue     %s", in, v1, v2, redact, got, want)
			}
		}
	})
}
