// Package hcltype reads an hclspec type expression (an Attr's or a BlockAttrs' `type`) the way
// Nomad does (helper/pluginutils/hclspecutils): HCL's own parser, then an evaluation with string,
// number, bool and any as variables and list, set, map, tuple and object as functions (Nomad does
// not use HCL's typeexpr package). Shared by tools/hcl-type-go and tools/hcldec-go.
package hcltype

import (
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

// Read parses and evaluates the type expression src as Nomad does: a null value is "any", any
// other value that is not a type is refused.
func Read(src string) (cty.Type, hcl.Diagnostics) {
	expr, diags := hclsyntax.ParseExpression([]byte(src), "type", hcl.Pos{Line: 1, Column: 1})
	if diags.HasErrors() {
		return cty.DynamicPseudoType, diags
	}
	v, diags := expr.Value(evalCtx)
	if diags.HasErrors() {
		return cty.DynamicPseudoType, diags
	}
	if v.IsNull() {
		return cty.DynamicPseudoType, diags
	}
	if !v.Type().Equals(typeVal) {
		return cty.DynamicPseudoType, append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Invalid type expression",
			Detail:   "A type is required, not " + v.Type().FriendlyName() + ".",
		})
	}
	return unwrap(v), diags
}
