/**
 * Config schemas and decoding: the hclspec builder ({@link spec}) and {@link decodeConfig}.
 * @module
 */
export {
  spec,
  HclSpec,
  AttrSpec,
  ObjectSpec,
  ArraySpec,
  BlockSpec,
  BlockAttrsSpec,
  BlockListSpec,
  BlockMapSpec,
  DefaultSpec,
  LiteralSpec,
  type SpecValue,
  type SpecFields,
  type ObjectValue,
  type BlockBody,
  type BlockBodyValue,
  type LabelledMap,
  type NameOption,
  type AttrOptions,
  type BlockListOptions,
  type Simplify,
  type OptionalKeys,
  type TupleValue,
} from "./spec.js";
export { decodeConfig } from "./decode.js";
export {
  parseHclType,
  formatHclType,
  type HclType,
  type HclTypeExpr,
  type HclValue,
  type StripSpaces,
  type ValueOfStripped,
} from "./types.js";
export { ConfigFieldError, formatPath, type FieldPath } from "./values.js";
export { toHclLiteral } from "./literal.js";
