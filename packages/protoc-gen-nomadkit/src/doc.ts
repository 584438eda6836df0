import type { DescMethod, DescService } from "@bufbuild/protobuf";
import { getComments } from "@bufbuild/protoplugin";

/** The proto comments of `desc` (leading + trailing), one line per array entry, without the leading space. */
export function protoDoc(desc: DescService | DescMethod): string[] {
  const c = getComments(desc);
  const parts = [c.leading, c.trailing].filter((s): s is string => s !== undefined && s.trim() !== "");
  return parts
    .join("\n")
    .replace(/\n$/, "")
    .split("\n")
    .map((l) => (l.startsWith(" ") ? l.substring(1) : l))
    .filter((l, i, a) => !(l === "" && (i === 0 || i === a.length - 1)));
}

/** Join doc paragraphs, dropping empty ones. */
export function docText(...paragraphs: (string | string[])[]): string {
  return paragraphs
    .map((p) => (Array.isArray(p) ? p.join("\n") : p))
    .filter((p) => p.trim() !== "")
    .join("\n\n");
}

export function deprecatedTag(desc: DescService | DescMethod): string {
  return desc.deprecated ? "@deprecated" : "";
}
