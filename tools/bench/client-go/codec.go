package main

// Messages as bytes: requests are built with protowire, replies handed over undecoded and their
// fields read with protowire, so the client copies no payload and needs no generated code.

import "google.golang.org/protobuf/encoding/protowire"

// rawCodec passes message bytes through: requests are built with protowire, responses parsed with it.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v interface{}) ([]byte, error) { return *v.(*[]byte), nil }

func (rawCodec) Unmarshal(data []byte, v interface{}) error {
	*v.(*[]byte) = data
	return nil
}

// firstBytes reads the first field `num` of message b holding bytes (a string or a nested message).
func firstBytes(b []byte, num protowire.Number) ([]byte, bool) {
	for len(b) > 0 {
		n, typ, m := protowire.ConsumeTag(b)
		if m < 0 {
			return nil, false
		}
		b = b[m:]
		if n == num && typ == protowire.BytesType {
			v, k := protowire.ConsumeBytes(b)
			return v, k >= 0
		}
		if m = protowire.ConsumeFieldValue(n, typ, b); m < 0 {
			return nil, false
		}
		b = b[m:]
	}
	return nil, false
}
