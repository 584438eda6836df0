// Command hcl-type-go reads hclspec Attr types the way Nomad does, for tools/test/hcl-type-go.test.ts
// to hold @nomadkit/client/hcl's parseHclType to: HCL's own parser (hclsyntax.ParseExpression, as
// Nomad's hclspec decoder calls it) and an evaluation with string, number, bool and any as variables
// and list, set, map, tuple and object as functions, as Nomad evaluates an Attr type (it does not use
// HCL's typeexpr package); the reading is nomadkit/hcltype's, shared with tools/hcldec-go. Written
// for this repository; built by tools/go/build.sh.
//
// Usage: echo '["list(string)", "object({a = string})"]' | hcl-type-go
// prints one JSON array: per input {"type": <cty JSON type>} or {"error": "<diagnostics>"}.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"nomadkit/hcltype"
)

type result struct {
	Type  json.RawMessage `json:"type,omitempty"`
	Error string          `json:"error,omitempty"`
}

func read(src string) result {
	t, diags := hcltype.Read(src)
	if diags.HasErrors() {
		return result{Error: diags.Error()}
	}
	b, err := t.MarshalJSON()
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
