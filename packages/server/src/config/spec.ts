/**
 * The hclspec builder: describe a config block once, get both the `hclspec.Spec` message Nomad
 * needs (ConfigSchema / TaskConfigSchema) and the TypeScript type of the decoded value.
 */
import { create } from "@bufbuild/protobuf";
import { SpecSchema, type Spec } from "@nomadkit/protocol/hclspec";
import { hclLiteralValue, toHclLiteral } from "./literal.js";
import { parseHclType, type HclType, type HclTypeExpr, type HclValue } from "./types.js";
import { ConfigFieldError, convertValue, describeValue, isPlainMap, zeroValue, type FieldPath } from "./values.js";

declare const VALUE: unique symbol;
declare const OPTIONAL: unique symbol;

const specBrand = Symbol.for("@nomadkit/server/HclSpec");
/** Each node class's name on its prototype, for `instanceof` across builds. */
const specKind = Symbol.for("@nomadkit/server/HclSpec.kind");

/**
 * One node of a config schema. `T` is the decoded value's type; `Optional` is true when the value
 * may be absent (then the property is optional in an enclosing object and `undefined` when absent).
 * Build nodes with {@link spec}.
 */
export abstract class HclSpec<T = unknown, Optional extends boolean = boolean> {
  /**
   * True for nodes from either build (ESM or CommonJS) of this package: a schema may combine nodes
   * of a library built for the other module system with its own.
   */
  static [Symbol.hasInstance](v: unknown): boolean {
    if (typeof v !== "object" || v === null) return false;
    if (this === HclSpec) return (v as Record<symbol, unknown>)[specBrand] === true;
    // A node class of this package (spec.attr's, spec.default's, ...): by its kind, whichever build.
    const kind = Object.prototype.hasOwnProperty.call(this.prototype, specKind) ? (this.prototype as unknown as Record<symbol, unknown>)[specKind] : undefined;
    if (kind !== undefined) return (v as Record<symbol, unknown>)[specKind] === kind;
    return Function.prototype[Symbol.hasInstance].call(this, v);
  }

  /** Phantom: the decoded type (type-level only). */
  declare readonly [VALUE]: T;
  /** Phantom: whether the value may be absent (type-level only). */
  declare readonly [OPTIONAL]: Optional;

  /**
   * The `hclspec.Spec` message for this node. `name` is the HCL name to use for attributes and
   * blocks that were not given one (an enclosing `object` passes its key).
   */
  abstract toProto(name?: string): Spec;

  /**
   * Decode this node's part of a msgpack-decoded config value (`null` when sent as null, `undefined`
   * when not sent at all, as in empty config bytes). Returns
   * `undefined` for an absent optional value; throws {@link ConfigFieldError} naming the field.
   */
  abstract decode(raw: unknown, path: FieldPath): T | undefined;
}
Object.defineProperty(HclSpec.prototype, specBrand, { value: true });

/** The decoded TypeScript type of a schema node: `SpecValue<typeof taskConfig>`. */
export type SpecValue<S> = S extends HclSpec<infer T, boolean> ? T : never;

/** The fields of an `object` (or of a block body given as a plain record). */
export type SpecFields = { readonly [key: string]: HclSpec<unknown, boolean> };

/** Flattens an intersection into one object type, so editors show decoded config types readably. */
export type Simplify<T> = { [K in keyof T]: T[K] } & {};
/** The keys of `F` whose nodes may be absent (optional attributes and blocks). */
export type OptionalKeys<F extends SpecFields> = {
  [K in keyof F]: F[K] extends HclSpec<unknown, true> ? K : never;
}[keyof F];

/** The decoded value of `spec.object(fields)`: optional fields become optional properties. */
export type ObjectValue<F extends SpecFields> = Simplify<
  { -readonly [K in Exclude<keyof F, OptionalKeys<F>>]: SpecValue<F[K]> } & {
    -readonly [K in OptionalKeys<F>]?: SpecValue<F[K]>;
  }
>;

/** A block body: a schema node, or a plain record of fields (shorthand for `spec.object(fields)`). */
export type BlockBody = HclSpec<unknown, boolean> | SpecFields;
/**
 * The decoded value of a {@link BlockBody}: `undefined` too where the body may be absent (a body
 * that is one optional attribute or block is absent in a block that leaves it unset).
 */
export type BlockBodyValue<B> = B extends HclSpec<infer T, infer O> ? (O extends true ? T | undefined : T) : B extends SpecFields ? ObjectValue<B> : never;

/** Nested records, one level per block label. */
export type LabelledMap<L extends readonly string[], T> = L extends readonly [string, ...infer R extends readonly string[]]
  ? Record<string, LabelledMap<R, T>>
  : T;

const HCL_NAME = /^[A-Za-z_][A-Za-z0-9_-]*$/;

function checkName(name: string | undefined, what: string): void {
  if (name !== undefined && !HCL_NAME.test(name)) throw new TypeError(`${what} name ${JSON.stringify(name)} is not a valid HCL identifier`);
}

function needName(explicit: string | undefined, hint: string | undefined, what: string): string {
  const name = explicit ?? hint;
  if (name === undefined) throw new TypeError(`${what} needs a name: give one, or put it inside spec.object({...})`);
  checkName(name, what);
  return name;
}

function missing(path: FieldPath, what: string): ConfigFieldError {
  return new ConfigFieldError(path, `required ${what} is missing`);
}

function toBody(b: BlockBody): HclSpec {
  return b instanceof HclSpec ? b : new ObjectSpec(b);
}

/** `spec.attr(...)`: an attribute `name = value`. */
export class AttrSpec<T, O extends boolean> extends HclSpec<T, O> {
  /** `type`, parsed; decoded values are checked and converted against it. */
  readonly hclType: HclType;
  constructor(
    /** HCL type expression, as given (sent to Nomad verbatim). */
    readonly type: string,
    /**
     * Whether a missing attribute is an error (Nomad rejects the config; decoding throws). Nomad
     * checks only that it is written: one written as null (`command = null`) arrives as null and
     * decodes to its type's zero value (`""`, `0`, `false`, `[]`, `{}`; null for `any`), as a Go
     * driver sees it.
     */
    readonly required: boolean,
    /** HCL name; undefined: the key in the enclosing `object`. */
    readonly name?: string,
  ) {
    super();
    this.hclType = parseHclType(type);
    checkName(name, "attribute");
  }
  toProto(name?: string): Spec {
    return create(SpecSchema, {
      block: { case: "Attr", value: { name: needName(this.name, name, "attribute"), type: this.type, required: this.required } },
    });
  }
  decode(raw: unknown, path: FieldPath): T | undefined {
    const v = convertValue(this.hclType, raw, path);
    if (v === null) {
      if (!this.required) return undefined;
      // Written as null: Nomad takes it (hcldec checks a required attribute is there, not its value).
      if (raw === null) return zeroValue(this.hclType) as T;
      throw missing(path, "attribute");
    }
    return v as T;
  }
}

/** `spec.object(...)`: several attributes/blocks decoded into one object. */
export class ObjectSpec<T> extends HclSpec<T, false> {
  constructor(
    /** The fields, by decoded property name (also the HCL name unless a field sets `name`). */
    readonly fields: SpecFields,
  ) {
    super();
    for (const [k, f] of Object.entries(fields)) {
      if (!(f instanceof HclSpec)) throw new TypeError(`object field ${JSON.stringify(k)} is not a spec node`);
    }
  }
  toProto(): Spec {
    const attributes: Record<string, Spec> = {};
    for (const [k, f] of Object.entries(this.fields)) attributes[k] = f.toProto(k);
    return create(SpecSchema, { block: { case: "object", value: { attributes } } });
  }
  decode(raw: unknown, path: FieldPath): T {
    if (raw !== null && raw !== undefined && !isPlainMap(raw)) {
      throw new ConfigFieldError(path, `expected a map of fields, got ${describeValue(raw)}`);
    }
    const src = (raw ?? {}) as Record<string, unknown>;
    const out: Record<string, unknown> = {};
    for (const [k, f] of Object.entries(this.fields)) {
      // Values arrive under the property name; errors name what the operator wrote (the HCL name).
      // A missing key is undefined, a null one null: Nomad sends every key, null where unset.
      const v = f.decode(Object.hasOwn(src, k) ? src[k] : undefined, [...path, hclName(f, k)]);
      if (v !== undefined) out[k] = v;
    }
    return out as T;
  }
}

/** `spec.array(...)`: a tuple of specs. */
export class ArraySpec<T> extends HclSpec<T, false> {
  constructor(
    /** One spec per tuple element, in order. */
    readonly items: readonly HclSpec[],
  ) {
    super();
  }
  toProto(): Spec {
    return create(SpecSchema, { block: { case: "array", value: { values: this.items.map((s) => s.toProto()) } } });
  }
  decode(raw: unknown, path: FieldPath): T {
    if (raw !== null && raw !== undefined && !Array.isArray(raw)) {
      throw new ConfigFieldError(path, `expected a list, got ${describeValue(raw)}`);
    }
    const src = (raw ?? []) as unknown[];
    if (raw != null && src.length !== this.items.length) {
      throw new ConfigFieldError(path, `expected ${this.items.length} elements, got ${src.length}`);
    }
    return this.items.map((s, i) => s.decode(raw == null ? undefined : src[i], [...path, i])) as T;
  }
}

/** `spec.block(...)`: one nested block `name { ... }`. */
export class BlockSpec<T, O extends boolean> extends HclSpec<T, O> {
  constructor(
    /** Spec of the block body. */
    readonly nested: HclSpec,
    /** Whether a missing block is an error. */
    readonly required: boolean,
    /** HCL block type name; undefined: the key in the enclosing `object`. */
    readonly name?: string,
  ) {
    super();
    checkName(name, "block");
  }
  toProto(name?: string): Spec {
    return create(SpecSchema, {
      block: {
        case: "blockValue",
        value: { name: needName(this.name, name, "block"), required: this.required, nested: this.nested.toProto() },
      },
    });
  }
  decode(raw: unknown, path: FieldPath): T | undefined {
    if (raw === undefined) {
      if (this.required) throw missing(path, "block");
      return undefined;
    }
    // Null: no block, or one whose body's value is null (a body that is one unset attribute). hcldec
    // checked that a required block is there, so for one this is its body's value.
    if (raw === null && !this.required) return undefined;
    return this.nested.decode(raw, path) as T;
  }
}

/** `spec.blockAttrs(...)`: a block whose body is free-form `key = value` pairs of one type. */
export class BlockAttrsSpec<T, O extends boolean> extends HclSpec<T, O> {
  /** `map(<type>)`, parsed: what the block body decodes as. */
  readonly mapType: HclType;
  constructor(
    /** HCL type expression of every value in the block. */
    readonly type: string,
    /** Whether a missing block is an error. */
    readonly required: boolean,
    /** HCL block type name; undefined: the key in the enclosing `object`. */
    readonly name?: string,
  ) {
    super();
    this.mapType = { kind: "map", elem: parseHclType(type) };
    checkName(name, "block");
  }
  toProto(name?: string): Spec {
    return create(SpecSchema, {
      block: { case: "blockAttrs", value: { name: needName(this.name, name, "block"), type: this.type, required: this.required } },
    });
  }
  decode(raw: unknown, path: FieldPath): T | undefined {
    const v = convertValue(this.mapType, raw, path);
    if (v === null) {
      if (this.required) throw missing(path, "block");
      return undefined;
    }
    return v as T;
  }
}

/** `spec.blockList(...)` / `spec.blockSet(...)`: a repeatable block decoded to an array. */
export class BlockListSpec<T> extends HclSpec<T, false> {
  constructor(
    /** `blockSet` when the order of the blocks carries no meaning; both decode to arrays. */
    readonly kind: "blockList" | "blockSet",
    /** Spec of each block's body. */
    readonly nested: HclSpec,
    /** Fewest blocks accepted (0: none required). */
    readonly minItems: number,
    /** Most blocks accepted (0: unlimited). */
    readonly maxItems: number,
    /** HCL block type name; undefined: the key in the enclosing `object`. */
    readonly name?: string,
  ) {
    super();
    checkName(name, "block");
    for (const [k, n] of [["min", minItems], ["max", maxItems]] as const) {
      if (!Number.isSafeInteger(n) || n < 0) throw new TypeError(`${kind} ${k} must be a non-negative integer, got ${n}`);
    }
  }
  toProto(name?: string): Spec {
    const value = {
      name: needName(this.name, name, "block"),
      minItems: BigInt(this.minItems),
      maxItems: BigInt(this.maxItems),
      nested: this.nested.toProto(),
    };
    return create(SpecSchema, { block: this.kind === "blockList" ? { case: "blockList", value } : { case: "blockSet", value } });
  }
  decode(raw: unknown, path: FieldPath): T {
    if (raw === null || raw === undefined) raw = [];
    if (!Array.isArray(raw)) throw new ConfigFieldError(path, `expected a list of blocks, got ${describeValue(raw)}`);
    if (raw.length < this.minItems) throw new ConfigFieldError(path, `expected at least ${this.minItems} blocks, got ${raw.length}`);
    if (this.maxItems > 0 && raw.length > this.maxItems) {
      throw new ConfigFieldError(path, `expected at most ${this.maxItems} blocks, got ${raw.length}`);
    }
    // A null element is a block whose body's value is null (a body that is one unset attribute).
    return raw.map((b: unknown, i) => this.nested.decode(b, [...path, i])) as T;
  }
}

/** `spec.blockMap(...)`: labelled blocks `name "label" { ... }` decoded to nested records. */
export class BlockMapSpec<T> extends HclSpec<T, false> {
  constructor(
    /** Names of the block labels, outermost first; one level of nesting per label. */
    readonly labels: readonly string[],
    /** Spec of each block's body. */
    readonly nested: HclSpec,
    /** HCL block type name; undefined: the key in the enclosing `object`. */
    readonly name?: string,
  ) {
    super();
    checkName(name, "block");
    if (labels.length === 0) throw new TypeError("blockMap needs at least one label name");
    for (const l of labels) checkName(l, "label");
  }
  toProto(name?: string): Spec {
    return create(SpecSchema, {
      block: {
        case: "blockMap",
        value: { name: needName(this.name, name, "block"), labels: [...this.labels], nested: this.nested.toProto() },
      },
    });
  }
  decode(raw: unknown, path: FieldPath): T {
    return this.#level(raw ?? {}, 0, path) as T;
  }
  #level(raw: unknown, depth: number, path: FieldPath): unknown {
    // A null is a block whose body's value is null (a body that is one unset attribute).
    if (depth === this.labels.length) return this.nested.decode(raw, path);
    if (!isPlainMap(raw)) throw new ConfigFieldError(path, `expected a map keyed by ${this.labels[depth]}, got ${describeValue(raw)}`);
    const out: Record<string, unknown> = {};
    for (const k of Object.keys(raw)) out[k] = this.#level(raw[k], depth + 1, [...path, k]);
    return out;
  }
}

/** `spec.default(...)`: `primary`, or `fallback` when primary is absent. */
export class DefaultSpec<T> extends HclSpec<T, false> {
  constructor(
    /** The spec whose value is used when present. */
    readonly primary: HclSpec,
    /** Used when `primary` is absent; usually a {@link LiteralSpec}. */
    readonly fallback: HclSpec,
  ) {
    super();
  }
  toProto(name?: string): Spec {
    return create(SpecSchema, {
      block: { case: "default", value: { primary: this.primary.toProto(name), default: this.fallback.toProto(name) } },
    });
  }
  decode(raw: unknown, path: FieldPath): T {
    const v = this.primary.decode(raw, path);
    return (v !== undefined ? v : this.fallback.decode(raw, path)) as T;
  }
}

/** `spec.literal(...)`: a constant. */
export class LiteralSpec<T> extends HclSpec<T, false> {
  /** `value` as an HCL expression, what Nomad receives. */
  readonly hcl: string;
  /** `value` as Nomad holds it (strings in NFC), what a Go driver gets. */
  readonly #decoded: T;
  constructor(
    /** The constant, as given; each decode returns a copy of it with its strings in NFC, as Nomad has them. */
    readonly value: T,
  ) {
    super();
    this.hcl = toHclLiteral(value);
    this.#decoded = hclLiteralValue(value);
  }
  toProto(): Spec {
    return create(SpecSchema, { block: { case: "literal", value: { value: this.hcl } } });
  }
  decode(): T {
    const v = this.#decoded;
    return (typeof v === "object" && v !== null ? structuredClone(v) : v) as T;
  }
}

/** Options shared by attributes and blocks. */
export interface NameOption {
  /** HCL name when it differs from the key in the enclosing `object` (the key names the decoded field). */
  name?: string;
}

/** Options of {@link spec.attr}. */
export interface AttrOptions extends NameOption {
  /** Nomad rejects the config when the attribute is missing. */
  required?: boolean;
}

/** Options of {@link spec.blockList} / {@link spec.blockSet}. */
export interface BlockListOptions extends NameOption {
  /** Minimum number of blocks (0: none). */
  min?: number;
  /** Maximum number of blocks (0: unlimited). */
  max?: number;
}

/** The decoded value of `spec.array(items)`: one element per item, `| undefined` where an item may be absent. */
export type TupleValue<A extends readonly HclSpec<unknown, boolean>[]> = {
  -readonly [K in keyof A]: A[K] extends HclSpec<infer T, infer O> ? (O extends true ? T | undefined : T) : never;
};

function attr<const S extends HclTypeExpr>(type: S, options: AttrOptions & { required: true }): HclSpec<HclValue<S>, false>;
function attr<const S extends HclTypeExpr>(type: S, options: NameOption & { default: HclValue<S> }): HclSpec<HclValue<S>, false>;
function attr<const S extends HclTypeExpr>(type: S, options?: AttrOptions): HclSpec<HclValue<S>, true>;
function attr(type: string, options: AttrOptions & { default?: unknown } = {}): HclSpec {
  const a = new AttrSpec(type, options.required === true, options.name);
  if (!("default" in options) || options.default === undefined) return a;
  // TypeScript refuses both; in JS the required check would come first and the default never apply.
  if (options.required === true) throw new TypeError(`attr(${JSON.stringify(type)}): required and default exclude each other (a default makes it optional)`);
  return withDefault(a, options.default);
}

function withDefault(primary: HclSpec, fallback: unknown): HclSpec {
  if (fallback instanceof HclSpec) return new DefaultSpec(primary, fallback);
  if (primary instanceof AttrSpec) {
    // Catch a default that Nomad could not convert to the attribute's type while the schema is built.
    try {
      convertValue(primary.hclType, fallback, []);
    } catch (err) {
      throw new TypeError(`default ${toHclLiteral(fallback)} does not fit type ${primary.type}: ${(err as Error).message}`);
    }
  }
  return new DefaultSpec(primary, new LiteralSpec(fallback));
}

function block<const B extends BlockBody>(body: B, options: NameOption & { required: true }): HclSpec<BlockBodyValue<B>, false>;
function block<const B extends BlockBody>(body: B, options?: NameOption & { required?: boolean }): HclSpec<BlockBodyValue<B>, true>;
function block(body: BlockBody, options: NameOption & { required?: boolean } = {}): HclSpec {
  return new BlockSpec(toBody(body), options.required === true, options.name);
}

function blockAttrs<const S extends HclTypeExpr>(type: S, options: NameOption & { required: true }): HclSpec<Record<string, HclValue<S>>, false>;
function blockAttrs<const S extends HclTypeExpr>(type: S, options?: NameOption & { required?: boolean }): HclSpec<Record<string, HclValue<S>>, true>;
function blockAttrs(type: string, options: NameOption & { required?: boolean } = {}): HclSpec {
  return new BlockAttrsSpec(type, options.required === true, options.name);
}

/**
 * Build config schemas. Each function returns a node; nodes nest. Inside `spec.object`, a field's
 * key is both the decoded property name and (unless `name` is given) the HCL name.
 *
 * @example
 * ```ts
 * const taskConfig = spec.object({
 *   command: spec.attr("string", { required: true }),
 *   args: spec.attr("list(string)", { default: [] }),
 *   env: spec.attr("map(string)"),
 *   mount: spec.blockList({ source: spec.attr("string", { required: true }), readonly: spec.attr("bool") }),
 * });
 * type TaskConfig = SpecValue<typeof taskConfig>;
 * // { command: string; args: string[]; env?: Record<string, string>; mount: { source: string; readonly?: boolean }[] }
 * ```
 */
export const spec = {
  /**
   * An attribute `name = value` of HCL type `type` (`"string"`, `"number"`, `"bool"`, `"any"`,
   * `"list(string)"`, `"set(number)"`, `"map(string)"`, `"object({...})"`, `"tuple([...])"`).
   * Optional unless `required: true` or a `default` is given.
   */
  attr,
  /** Several fields decoded into one object; the usual root of a schema. */
  object<const F extends SpecFields>(fields: F): HclSpec<ObjectValue<F>, false> {
    return new ObjectSpec<ObjectValue<F>>(fields);
  },
  /** A tuple decoded from an ordered list of specs. */
  array<const A extends readonly HclSpec<unknown, boolean>[]>(items: A): HclSpec<TupleValue<A>, false> {
    return new ArraySpec<TupleValue<A>>(items);
  },
  /** One nested block `name { ... }`; absent (undefined) unless `required: true`. */
  block,
  /** A block whose body is free-form `key = value` pairs of one type, decoded to a record. */
  blockAttrs,
  /** A repeatable block decoded, in order, to an array (empty when absent). */
  blockList<const B extends BlockBody>(body: B, options: BlockListOptions = {}): HclSpec<BlockBodyValue<B>[], false> {
    return new BlockListSpec<BlockBodyValue<B>[]>("blockList", toBody(body), options.min ?? 0, options.max ?? 0, options.name);
  },
  /** A repeatable block decoded to an array whose order carries no meaning (empty when absent). */
  blockSet<const B extends BlockBody>(body: B, options: BlockListOptions = {}): HclSpec<BlockBodyValue<B>[], false> {
    return new BlockListSpec<BlockBodyValue<B>[]>("blockSet", toBody(body), options.min ?? 0, options.max ?? 0, options.name);
  },
  /**
   * Labelled blocks `name "l1" "l2" { ... }` decoded to nested records keyed by the labels
   * (empty when absent).
   */
  blockMap<const L extends readonly [string, ...string[]], const B extends BlockBody>(
    labels: L,
    body: B,
    options: NameOption = {},
  ): HclSpec<LabelledMap<L, BlockBodyValue<B>>, false> {
    return new BlockMapSpec<LabelledMap<L, BlockBodyValue<B>>>(labels, toBody(body), options.name);
  },
  /** `primary`, or `fallback` (a value or a spec) when primary is absent. */
  default<T>(primary: HclSpec<T, boolean>, fallback: T | HclSpec<T, boolean>): HclSpec<T, false> {
    return withDefault(primary, fallback) as HclSpec<T, false>;
  },
  /** A constant value. */
  literal<T>(value: T): HclSpec<T, false> {
    return new LiteralSpec(value);
  },
} as const;

/** The HCL name of the object field `key`: its own `name` when it sets one (through `spec.default` too). */
function hclName(f: HclSpec, key: string): string {
  if (f instanceof DefaultSpec) return hclName(f.primary, key);
  const own = (f as { name?: unknown }).name;
  return typeof own === "string" && own !== "" ? own : key;
}

for (const [kind, node] of Object.entries({ AttrSpec, ObjectSpec, ArraySpec, BlockSpec, BlockAttrsSpec, BlockListSpec, BlockMapSpec, DefaultSpec, LiteralSpec })) Object.defineProperty(node.prototype, specKind, { value: kind });
