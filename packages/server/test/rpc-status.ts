// google.rpc.Status encoded/decoded by hand with protobuf-es's wire primitives, independent of
// connect's own implementation, so detail encoding is checked against the spec rather than itself.
import { BinaryReader, BinaryWriter } from "@bufbuild/protobuf/wire";

export interface RpcStatus {
  code: number;
  message: string;
  details: { typeUrl: string; value: Uint8Array }[];
}

export function encodeRpcStatus(s: RpcStatus): Uint8Array {
  const w = new BinaryWriter();
  w.tag(1, 0).int32(s.code);
  w.tag(2, 2).string(s.message);
  for (const d of s.details) {
    w.tag(3, 2).fork();
    w.tag(1, 2).string(d.typeUrl);
    w.tag(2, 2).bytes(d.value);
    w.join();
  }
  return w.finish();
}

export function decodeRpcStatus(bytes: Uint8Array): RpcStatus {
  const s: RpcStatus = { code: 0, message: "", details: [] };
  const r = new BinaryReader(bytes);
  while (r.pos < r.len) {
    const [field, wt] = r.tag();
    if (field === 1) s.code = r.int32();
    else if (field === 2) s.message = r.string();
    else if (field === 3) {
      const any = new BinaryReader(r.bytes());
      const d = { typeUrl: "", value: new Uint8Array() };
      while (any.pos < any.len) {
        const [f, t] = any.tag();
        if (f === 1) d.typeUrl = any.string();
        else if (f === 2) d.value = any.bytes();
        else any.skip(t);
      }
      s.details.push(d);
    } else r.skip(wt);
  }
  return s;
}
