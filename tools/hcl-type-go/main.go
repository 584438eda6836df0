// Command hcl-type-go reads hclspec Attr types the way Nomad does, for tools/test/hcl-type-go.test.ts
// to hold @nomadkit/client/hcl's parseHclType to: HCL's own parser (hclsyntax.ParseExpression, as
// Nomad's hclspec decoder calls it) and an evaluation with string, number, bool and any as variables
// and list, set, map, tuple and object as functions, as Nomad evaluates an Attr type (it does not use
// HCL's typeexpr package). Written for this repository; built by tools/go/build.sh.
//
// Usage: echo '["list(string)", "object({a = string})"]' | hcl-type-go
// prints one JSON array: per input {"type": <cty JSON type>} or {"error": "<diagnostics>"}.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/function"
)

// typeVal is the capsule type of a value holding a cty.Type: what the type variables hold and the
// type functions return.
var typeVal = cty.Capsule("type", reflect.TypeOf(cty.NilType))

func wrap(t cty.Type) cty.Value   { return cty.CapsuleVal(typeVal, &t) }
func unwrap(v cty.Value) cty.Type { return *(v.EncapsulatedValue().(*cty.Type)) }

// constructor is a one-argument type function; the parameter type makes cty check the argument
// (a type, a list of types, a map of types) before build sees it.
func constructor(param cty.Type, build func(cty.Value) cty.Type) function.Function {
	return function.New(&function.Spec{
		Params: []function.Parameter{{Name: "arg", Type: param}},
		Type:   function.StaticReturnType(typeVal),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			return wrap(build(args[0])), nil
		},
	})
}

var evalCtx = &hcl.EvalContext{
	Variables: map[string]cty.Value{
		"string": wrap(cty.String),
		"number": wrap(cty.Number),
		"bool":   wrap(cty.Bool),
		"any":    wrap(cty.DynamicPseudoType),
	},
	Functions: map[string]function.Function{
		"list": constructor(typeVal, func(v cty.Value) cty.Type { return cty.List(unwrap(v)) }),
		"set":  constructor(typeVal, func(v cty.Value) cty.Type { return cty.Set(unwrap(v)) }),
		"map":  constructor(typeVal, func(v cty.Value) cty.Type { return cty.Map(unwrap(v)) }),
		"tuple": constructor(cty.List(typeVal), func(v cty.Value) cty.Type {
			elems := []cty.Type{}
			for it := v.ElementIterator(); it.Next(); {
				_, e := it.Element()
				elems = append(elems, unwrap(e))
			}
			return cty.Tuple(elems)
		}),
		"object": constructor(cty.Map(typeVal), func(v cty.Value) cty.Type {
			attrs := map[string]cty.Type{}
			for it := v.ElementIterator(); it.Next(); {
				k, e := it.Element()
				attrs[k.AsString()] = unwrap(e)
			}
			return cty.Object(attrs)
		}),
	},
}

type result struct {
	Type  json.RawMessage `json:"type,omitempty"`
	Error string          `json:"error,omitempty"`
}

func read(src string) result {
	expr, diags := hclsyntax.ParseExpression([]byte(src), "type", hcl.Pos{Line: 1, Column: 1})
	if diags.HasErrors() {
		return result{Error: diags.Error()}
	}
	v, diags := expr.Value(evalCtx)
	if diags.HasErrors() {
		return result{Error: diags.Error()}
	}
	if v.IsNull() {
		// Nomad takes a null type as "any".
		return result{Type: json.RawMessage(`"dynamic"`)}
	}
	if !v.Type().Equals(typeVal) {
		return result{Error: "a type is required, not " + v.Type().FriendlyName()}
	}
	b, err := unwrap(v).MarshalJSON()
	if err != nil {
		return result{Error: err.Error()}
	}
	return result{Type: b}
}

func main() {
	var srcs []string
	if len(os.Args) != 1 || json.NewDecoder(os.Stdin).Decode(&srcs) != nil {
		fmt.Fprintln(os.Stderr, `usage: echo '["type", ...]' | hcl-type-go`)
		os.Exit(2)
	}
	out := make([]result, len(srcs))
	for i, src := range srcs {
		out[i] = read(src)
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
