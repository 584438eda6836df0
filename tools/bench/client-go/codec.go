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

// eachField calls fn with every length-delimited or varint field of message b, in order: its
// number and wire type, its bytes (length-delimited) or its value (varint). Other fields are
// skipped; fn's error, or a malformed message, ends the walk.
func eachField(b []byte, fn func(num protowire.Number, typ protowire.Type, data []byte, value uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var data []byte
		var value uint64
		switch typ {
		case protowire.BytesType:
			data, n = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			value, n = protowire.ConsumeVarint(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if typ == protowire.BytesType || typ == protowire.VarintType {
			if err := fn(num, typ, data, value); err != nil {
				return err
			}
		}
	}
	return nil
}

// firstBytes reads the first field `num` of message b holding bytes (a string or a nested message).
func firstBytes(b []byte, num protowire.Number) (found []byte, ok bool) {
	err := eachField(b, func(n protowire.Number, typ protowire.Type, data []byte, _ uint64) error {
		if !ok && n == num && typ == protowire.BytesType {
			found, ok = data, true
		}
		return nil
	})
	return found, ok && err == nil
}
