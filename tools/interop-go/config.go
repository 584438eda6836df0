package main

// Config bytes as Nomad makes them: Nomad decodes the HCL block against the plugin's hclspec with
// hcldec and marshals the resulting cty value with go-cty's msgpack package (for SetConfig and
// for TaskConfig.msgpack_driver_config alike). So a plugin sees every attribute its schema
// declares, absent ones as nil, not just the keys the operator wrote. We build the value from a
// JSON object and fill the schema's missing top-level keys the way hcldec does.

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"

	ctyjson "github.com/zclconf/go-cty/cty/json"
	ctymsgpack "github.com/zclconf/go-cty/cty/msgpack"
)

// encodeConfig returns msgpack bytes for jsonText shaped by spec (an hclspec.Spec; may be absent)
// and notes describing what was filled in.
func encodeConfig(jsonText string, spec pm) ([]byte, []string, error) {
	var obj map[string]interface{}
	dec := json.NewDecoder(strings.NewReader(jsonText))
	dec.UseNumber()
	if err := dec.Decode(&obj); err != nil || obj == nil {
		return nil, nil, fmt.Errorf("config JSON must be an object: %q", jsonText)
	}
	var notes []string
	if attrs := spec.Msg("object"); attrs.Valid() {
		m := attrs.m.Get(attrs.fd("attributes")).Map()
		var keys []string
		m.Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
			keys = append(keys, k.String())
			return true
		})
		sort.Strings(keys)
		for _, k := range keys {
			if _, given := obj[k]; given {
				continue
			}
			val, note := absentValue(pm{m.Get(protoreflect.ValueOfString(k).MapKey()).Message()})
			if note != "" {
				notes = append(notes, k+": "+note)
			}
			if val != nil {
				obj[k] = val
			}
		}
	}
	raw, err := json.Marshal(obj)
	if err != nil {
		return nil, nil, err
	}
	ty, err := ctyjson.ImpliedType(raw)
	if err != nil {
		return nil, nil, err
	}
	val, err := ctyjson.Unmarshal(raw, ty)
	if err != nil {
		return nil, nil, err
	}
	out, err := ctymsgpack.Marshal(val, ty)
	return out, notes, err
}

// absentValue is what hcldec yields for a top-level spec whose key the config doesn't set.
// A nil result with a note means "leave it out".
func absentValue(s pm) (interface{}, string) {
	switch {
	case s.Has("Attr"), s.Has("block_value"), s.Has("block_attrs"):
		return json.RawMessage("null"), "null"
	case s.Has("block_list"), s.Has("block_set"):
		return []interface{}{}, "[]"
	case s.Has("block_map"):
		return map[string]interface{}{}, "{}"
	case s.Has("literal"):
		return literal(s.Msg("literal").Str("value"))
	case s.Has("default"):
		d := s.Msg("default").Msg("default")
		if d.Has("literal") {
			return literal(d.Msg("literal").Str("value"))
		}
		return nil, "default is not a literal; left out"
	}
	return nil, "unsupported spec kind; left out"
}

// literal reads an hclspec literal (HCL expression text); the common ones are valid JSON.
func literal(text string) (interface{}, string) {
	var v json.RawMessage
	if err := json.Unmarshal([]byte(text), &v); err != nil {
		return nil, fmt.Sprintf("default %q is not JSON-compatible; left out", text)
	}
	return v, "default " + text
}
