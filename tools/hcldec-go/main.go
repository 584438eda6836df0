// Command hcldec-go shapes task configs the way a Nomad client does before it hands one to a driver,
// for tools/test/hcldec-go.test.ts to hold @nomadkit/conformance's encodeConfig to. Per case, the
// driver's hclspec schema is converted to an hcldec spec as Nomad's hclspecutils.Convert does (types
// read by nomadkit/hcltype, literals evaluated with Nomad's stdlib functions), and the config goes
// through what hclutils.ParseHclInterface does: JSON-encoded, parsed by HCL's JSON parser, decoded
// by hcldec.Decode with Nomad's stdlib functions and no variables (a real client passes the task's
// environment, which a conformance run does not have). The value is encoded as
// TaskConfig.EncodeDriverConfig does: cty's msgpack, with the value's own type. Written for this
// repository; built by tools/go/build.sh.
//
// Usage: echo '[{"spec": <hclspec Spec as protobuf JSON>, "config": {...}}]' | hcldec-go
// prints one JSON array: per case {"msgpack": "<base64>", "json": <cty JSON>, "type": <cty JSON
// type>}, {"error": "<diagnostics>"} or {"panic": "<what hcldec panicked with>"}.
package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"strconv"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hcldec"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	hcljson "github.com/hashicorp/hcl/v2/json"
	"github.com/zclconf/go-cty/cty/function"
	"github.com/zclconf/go-cty/cty/function/stdlib"
	ctyjson "github.com/zclconf/go-cty/cty/json"
	ctymsgpack "github.com/zclconf/go-cty/cty/msgpack"

	"nomadkit/hcltype"
)

// spec is the hclspec Spec message in protobuf's JSON form (field names in lowerCamelCase, the Attr
// field as "Attr", 64-bit integers as strings or numbers).
type spec struct {
	Object *struct {
		Attributes map[string]*spec `json:"attributes"`
	} `json:"object"`
	Array *struct {
		Values []*spec `json:"values"`
	} `json:"array"`
	Attr       *attrLike `json:"Attr"`
	BlockValue *struct {
		Name     string `json:"name"`
		Required bool   `json:"required"`
		Nested   *spec  `json:"nested"`
	} `json:"blockValue"`
	BlockAttrs *attrLike  `json:"blockAttrs"`
	BlockList  *blockColl `json:"blockList"`
	BlockSet   *blockColl `json:"blockSet"`
	BlockMap   *struct {
		Name   string   `json:"name"`
		Labels []string `json:"labels"`
		Nested *spec    `json:"nested"`
	} `json:"blockMap"`
	Default *struct {
		Primary *spec `json:"primary"`
		Default *spec `json:"default"`
	} `json:"default"`
	Literal *struct {
		Value string `json:"value"`
	} `json:"literal"`
}

type attrLike struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	Required bool   `json:"required"`
}

type blockColl struct {
	Name     string  `json:"name"`
	MinItems uint64s `json:"minItems"`
	MaxItems uint64s `json:"maxItems"`
	Nested   *spec   `json:"nested"`
}

// uint64s is a protobuf JSON uint64: a string or a number.
type uint64s uint64

func (u *uint64s) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		n, err := strconv.ParseUint(s, 10, 64)
		*u = uint64s(n)
		return err
	}
	var n uint64
	err := json.Unmarshal(b, &n)
	*u = uint64s(n)
	return err
}

func errDiag(summary, detail string) hcl.Diagnostics {
	return hcl.Diagnostics{{Severity: hcl.DiagError, Summary: summary, Detail: detail}}
}

// stdlibFuncs are the functions Nomad offers in a task config and in a spec's literals
// (hclutils.GetStdlibFuncs, hclspecutils' specFuncs).
var stdlibFuncs = map[string]function.Function{
	"abs":        stdlib.AbsoluteFunc,
	"coalesce":   stdlib.CoalesceFunc,
	"concat":     stdlib.ConcatFunc,
	"hasindex":   stdlib.HasIndexFunc,
	"int":        stdlib.IntFunc,
	"jsondecode": stdlib.JSONDecodeFunc,
	"jsonencode": stdlib.JSONEncodeFunc,
	"length":     stdlib.LengthFunc,
	"lower":      stdlib.LowerFunc,
	"max":        stdlib.MaxFunc,
	"min":        stdlib.MinFunc,
	"reverse":    stdlib.ReverseFunc,
	"strlen":     stdlib.StrlenFunc,
	"substr":     stdlib.SubstrFunc,
	"upper":      stdlib.UpperFunc,
}

// convert is hclspecutils.Convert: implied names come from an object's keys, an explicit name wins.
func convert(s *spec, implied string) (hcldec.Spec, hcl.Diagnostics) {
	if s == nil {
		return nil, errDiag("Missing spec block", "A block spec must have exactly one child spec.")
	}
	name := func(n string) string {
		if n != "" {
			return n
		}
		return implied
	}
	switch {
	case s.Object != nil:
		var diags hcl.Diagnostics
		out := hcldec.ObjectSpec{}
		for k, v := range s.Object.Attributes {
			d, ds := convert(v, k)
			diags = append(diags, ds...)
			out[k] = d
		}
		return out, diags
	case s.Array != nil:
		var diags hcl.Diagnostics
		out := hcldec.TupleSpec{}
		for _, v := range s.Array.Values {
			d, ds := convert(v, "")
			diags = append(diags, ds...)
			out = append(out, d)
		}
		return out, diags
	case s.Attr != nil:
		t, diags := hcltype.Read(s.Attr.Type)
		if diags.HasErrors() {
			return nil, diags
		}
		n := name(s.Attr.Name)
		if n == "" {
			return nil, errDiag("Missing name in attribute spec", "")
		}
		return &hcldec.AttrSpec{Name: n, Type: t, Required: s.Attr.Required}, nil
	case s.BlockValue != nil:
		nested, diags := convert(s.BlockValue.Nested, "")
		return &hcldec.BlockSpec{TypeName: name(s.BlockValue.Name), Required: s.BlockValue.Required, Nested: nested}, diags
	case s.BlockAttrs != nil:
		t, diags := hcltype.Read(s.BlockAttrs.Type)
		if diags.HasErrors() {
			return nil, diags
		}
		n := name(s.BlockAttrs.Name)
		if n == "" {
			return nil, errDiag("Missing name in block_attrs spec", "")
		}
		return &hcldec.BlockAttrsSpec{TypeName: n, ElementType: t, Required: s.BlockAttrs.Required}, nil
	case s.BlockList != nil:
		b := s.BlockList
		nested, diags := convert(b.Nested, "")
		if name(b.Name) == "" {
			return nil, append(diags, errDiag("Missing name in block_list spec", "")...)
		}
		return &hcldec.BlockListSpec{TypeName: name(b.Name), MinItems: int(b.MinItems), MaxItems: int(b.MaxItems), Nested: nested}, diags
	case s.BlockSet != nil:
		b := s.BlockSet
		nested, diags := convert(b.Nested, "")
		if name(b.Name) == "" {
			return nil, append(diags, errDiag("Missing name in block_set spec", "")...)
		}
		return &hcldec.BlockSetSpec{TypeName: name(b.Name), MinItems: int(b.MinItems), MaxItems: int(b.MaxItems), Nested: nested}, diags
	case s.BlockMap != nil:
		b := s.BlockMap
		nested, diags := convert(b.Nested, "")
		if name(b.Name) == "" {
			return nil, append(diags, errDiag("Missing name in block_map spec", "")...)
		}
		if len(b.Labels) < 1 {
			return nil, append(diags, errDiag("Invalid block label name list", "A block_map must have at least one label specified.")...)
		}
		return &hcldec.BlockMapSpec{TypeName: name(b.Name), LabelNames: b.Labels, Nested: nested}, diags
	case s.Default != nil:
		primary, diags := convert(s.Default.Primary, "")
		if diags.HasErrors() {
			return nil, diags
		}
		def, ds := convert(s.Default.Default, "")
		diags = append(diags, ds...)
		if diags.HasErrors() {
			return nil, diags
		}
		return &hcldec.DefaultSpec{Primary: primary, Default: def}, diags
	case s.Literal != nil:
		expr, diags := hclsyntax.ParseExpression([]byte(s.Literal.Value), "proto", hcl.Pos{})
		if diags.HasErrors() {
			return nil, diags
		}
		v, ds := expr.Value(&hcl.EvalContext{Functions: stdlibFuncs})
		diags = append(diags, ds...)
		if diags.HasErrors() {
			return nil, diags
		}
		return &hcldec.LiteralSpec{Value: v}, diags
	default:
		return nil, errDiag("Invalid spec block", "No block of the Spec oneof is set.")
	}
}

type input struct {
	Spec   *spec           `json:"spec"`
	Config json.RawMessage `json:"config"`
}

type result struct {
	Msgpack string          `json:"msgpack,omitempty"`
	JSON    json.RawMessage `json:"json,omitempty"`
	Type    json.RawMessage `json:"type,omitempty"`
	Error   string          `json:"error,omitempty"`
	Panic   string          `json:"panic,omitempty"`
}

func run(in input) (res result) {
	// hcldec panics on some inputs (a block_attrs of type any whose values differ in type, in
	// hcl 2.14): reported, for the test to tell a crash of Nomad's from a refusal.
	defer func() {
		if p := recover(); p != nil {
			res = result{Panic: fmt.Sprint(p)}
		}
	}()
	s, diags := convert(in.Spec, "")
	if diags.HasErrors() {
		return result{Error: "spec: " + diags.Error()}
	}
	// Nomad holds a task's config as decoded from the job's JSON (numbers as float64) and encodes it
	// back to JSON for HCL's parser.
	var config interface{}
	if err := json.Unmarshal(in.Config, &config); err != nil {
		return result{Error: "config: " + err.Error()}
	}
	src, err := json.Marshal(config)
	if err != nil {
		return result{Error: "config: " + err.Error()}
	}
	file, diags := hcljson.Parse(src, "")
	if diags.HasErrors() {
		return result{Error: diags.Error()}
	}
	val, diags := hcldec.Decode(file.Body, s, &hcl.EvalContext{Functions: stdlibFuncs})
	if diags.HasErrors() {
		return result{Error: diags.Error()}
	}
	mp, err := ctymsgpack.Marshal(val, val.Type())
	if err != nil {
		return result{Error: "msgpack: " + err.Error()}
	}
	js, err := ctyjson.Marshal(val, val.Type())
	if err != nil {
		return result{Error: "json: " + err.Error()}
	}
	ty, err := ctyjson.MarshalType(val.Type())
	if err != nil {
		return result{Error: "type: " + err.Error()}
	}
	return result{Msgpack: base64.StdEncoding.EncodeToString(mp), JSON: js, Type: ty}
}

func main() {
	var cases []input
	if len(os.Args) != 1 || json.NewDecoder(os.Stdin).Decode(&cases) != nil {
		fmt.Fprintln(os.Stderr, `usage: echo '[{"spec": {...}, "config": {...}}, ...]' | hcldec-go`)
		os.Exit(2)
	}
	out := make([]result, len(cases))
	for i, c := range cases {
		out[i] = run(c)
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
