import type { DescFile, DescMethod } from "@bufbuild/protobuf";
import type { ImportSymbol } from "@bufbuild/protoplugin";

/**
 * Members every object inherits from `Object.prototype`. A handler or client method named like one
 * would be shadowed by, or shadow, the inherited member: `handlers.hasOwnProperty` of a `{}` is a
 * function, so the RPC would not answer Unimplemented, and `Partial<XHandlers>` could not be
 * satisfied. protobuf-es already escapes `constructor`, `toString`, `toJSON` and `valueOf` in
 * `localName` (`constructor$`); they are listed for completeness.
 */
const objectPrototypeMembers = new Set([
  "constructor",
  "toString",
  "toJSON",
  "valueOf",
  "hasOwnProperty",
  "isPrototypeOf",
  "propertyIsEnumerable",
  "toLocaleString",
  "__defineGetter__",
  "__defineSetter__",
  "__lookupGetter__",
  "__lookupSetter__",
  "__proto__",
]);

/**
 * The `XHandlers` member of `method`: its `localName`, `$` appended (as protobuf-es does) to an
 * `Object.prototype` member and to `then`: an object with a `then` method is thenable, so handlers
 * built by an async function (`async () => ({ then: ... })`) would never settle, the promise calling
 * the RPC handler with its resolve and reject.
 */
export function handlerName(method: DescMethod): string {
  return objectPrototypeMembers.has(method.localName) || method.localName === "then" ? method.localName + "$" : method.localName;
}

/** The `XClient` method of `method`: the same name as its handler (a client with a `then` method would be thenable too). */
export function clientMethodName(method: DescMethod): string {
  return handlerName(method);
}

/**
 * Throw if two RPCs of one service share a `localName` (`Foo` and `foo`): the generated members would
 * be duplicates, and protobuf-es's `service.method` and connect's router keep only one of them.
 */
export function checkMethodNames(file: DescFile): void {
  for (const service of file.services) {
    const seen = new Map<string, DescMethod>();
    for (const method of service.methods) {
      const other = seen.get(method.localName);
      if (other !== undefined) {
        throw new Error(
          `${file.proto.name}: service ${service.typeName}: rpc ${other.name} and rpc ${method.name} both generate ` +
            `the name "${method.localName}"; rename one of them`,
        );
      }
      seen.set(method.localName, method);
    }
  }
}

/**
 * Names for the parameters and locals of generated code that shadow none of `symbols` (the imports
 * the code refers to, such as a service descriptor named `router` or `options`): each of `names`,
 * with `$` appended until it is free. protoplugin gives an import that must be renamed an alias
 * ending in `$` and a digit, so no final import name can be one of these either.
 */
export function localNames<const N extends string>(symbols: ImportSymbol[], names: readonly N[]): Record<N, string> {
  const taken = new Set(symbols.map((s) => s.name));
  const out = {} as Record<N, string>;
  for (const name of names) {
    let n: string = name;
    while (taken.has(n)) n += "$";
    out[name] = n;
  }
  return out;
}
