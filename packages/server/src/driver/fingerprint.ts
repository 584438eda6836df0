/**
 * Fingerprint streams: the first response at once, then one per period (Nomad's own drivers
 * re-send every 30 s) and one whenever the driver pushes a change. The stream stays open until
 * Nomad cancels it or the plugin shuts down.
 */
import { create, equals, type MessageInitShape } from "@bufbuild/protobuf";
import { AttributeSchema } from "@nomadkit/protocol/structs";
import { FingerprintResponseSchema, FingerprintResponse_HealthState, type FingerprintResponse } from "@nomadkit/protocol/driver";
import type { Logger } from "../log/index.js";
import type { AttributeValue, Fingerprint, FingerprintControl } from "./types.js";
import { StreamWaits } from "./util.js";
import { errorText } from "../runtime/error-text.js";

/** Default period between fingerprints. */
export const DEFAULT_FINGERPRINT_INTERVAL_MS = 30_000;

const HEALTH: Record<string, FingerprintResponse_HealthState> = {
  healthy: FingerprintResponse_HealthState.HEALTHY,
  unhealthy: FingerprintResponse_HealthState.UNHEALTHY,
  undetected: FingerprintResponse_HealthState.UNDETECTED,
};
const DESCRIPTION: Record<number, string> = {
  [FingerprintResponse_HealthState.HEALTHY]: "Healthy",
  [FingerprintResponse_HealthState.UNHEALTHY]: "Unhealthy",
  [FingerprintResponse_HealthState.UNDETECTED]: "Undetected",
};

/**
 * Convert a node attribute value to Nomad's `structs.Attribute`: strings, booleans, safe integers
 * (int) and other numbers (float), or an explicit `{ float | int | string | bool, unit }`.
 *
 * @example
 * ```ts
 * toAttribute({ float: 1.5, unit: "GHz" }); // { value: { case: "floatVal", value: 1.5 }, unit: "GHz" }
 * ```
 */
export function toAttribute(v: AttributeValue): MessageInitShape<typeof AttributeSchema> {
  const bad = () =>
    new TypeError(`expected a string, boolean, number, bigint or { float | int | string | bool, unit? }, got ${typeof v === "object" ? JSON.stringify(v) : String(v)}`);
  switch (typeof v) {
    case "string":
      return { value: { case: "stringVal", value: v } };
    case "boolean":
      return { value: { case: "boolVal", value: v } };
    case "bigint":
      return { value: { case: "intVal", value: v } };
    case "number":
      return Number.isSafeInteger(v) ? { value: { case: "intVal", value: BigInt(v) } } : { value: { case: "floatVal", value: v } };
  }
  // Plain JS drivers: anything else was taken for `{ bool }`, so `{ foo: 1 }` became false.
  if (typeof v !== "object" || v === null) throw bad();
  const unit = v.unit ?? "";
  if ("float" in v && typeof v.float === "number") return { value: { case: "floatVal", value: v.float }, unit };
  if ("int" in v && (typeof v.int === "number" || typeof v.int === "bigint")) return { value: { case: "intVal", value: BigInt(v.int) }, unit };
  if ("string" in v && typeof v.string === "string") return { value: { case: "stringVal", value: v.string }, unit };
  if ("bool" in v && typeof v.bool === "boolean") return { value: { case: "boolVal", value: v.bool }, unit };
  throw bad();
}

/**
 * Convert a driver's {@link Fingerprint} to the response message.
 *
 * @example
 * ```ts
 * toFingerprintResponse({ health: "healthy", attributes: { "driver.hello.version": "1.0" } });
 * ```
 */
export function toFingerprintResponse(fp: Fingerprint): FingerprintResponse {
  const health = typeof fp.health === "number" ? fp.health : HEALTH[fp.health];
  if (health === undefined) throw new TypeError(`fingerprint health must be healthy, unhealthy or undetected, got ${JSON.stringify(fp.health)}`);
  const attributes: Record<string, MessageInitShape<typeof AttributeSchema>> = {};
  for (const [k, v] of Object.entries(fp.attributes ?? {})) {
    // Left out, as a Go driver leaves out what it does not know (`{ version: process.env.X }`).
    if (v === undefined || v === null) continue;
    try {
      attributes[k] = toAttribute(v);
    } catch (err) {
      throw new TypeError(`fingerprint attribute ${JSON.stringify(k)}: ${(err as Error).message}`);
    }
  }
  return create(FingerprintResponseSchema, {
    health,
    healthDescription: fp.description ?? DESCRIPTION[health] ?? "",
    attributes,
  });
}

/** Source of fingerprints shared by all Fingerprint streams of one plugin. */
export class FingerprintSource implements FingerprintControl {
  #pushed: FingerprintResponse | undefined;
  /** Bumped by every update(), so a stream busy while one happens still notices it. */
  #version = 0;
  readonly #waiters = new Set<() => void>();
  /** The driver's fingerprint() being computed, shared by every stream that asks meanwhile. */
  #inflight: Promise<FingerprintResponse> | undefined;

  /** The last failure logged: a fingerprint that keeps failing the same way is logged once. */
  #lastFailure: string | undefined;

  constructor(
    private readonly compute: (() => Fingerprint | Promise<Fingerprint>) | undefined,
    private readonly intervalMs: number,
    private readonly logger?: Logger,
  ) {}

  /** The unhealthy answer for a failed fingerprint, logged (Nomad shows only the description). */
  #failed(err: unknown): FingerprintResponse {
    const r = failed(err);
    if (r.err !== this.#lastFailure) this.logger?.warn("fingerprint failed; the driver is reported unhealthy", { error: r.err });
    this.#lastFailure = r.err;
    return r;
  }

  /** Push `fingerprint` (used until the driver's next periodic fingerprint), or re-run `fingerprint()`. */
  update(fingerprint?: Fingerprint): void {
    if (fingerprint !== undefined) this.#pushed = this.#safe(() => toFingerprintResponse(fingerprint));
    else {
      this.#pushed = undefined;
      // A call already out began before whatever made the driver ask: the streams call again.
      this.#inflight = undefined;
    }
    this.#version++;
    for (const w of [...this.#waiters]) w();
  }

  #safe(fn: () => FingerprintResponse): FingerprintResponse {
    try {
      return fn();
    } catch (err) {
      return this.#failed(err);
    }
  }

  /**
   * The current fingerprint. A pushed one answers pokes (and everything when the driver has no
   * `fingerprint()`); periodic and first fingerprints call the driver again.
   */
  async current(fresh = true): Promise<FingerprintResponse> {
    if (this.#pushed !== undefined && (!fresh || this.compute === undefined)) return this.#pushed;
    const compute = this.compute;
    if (compute === undefined) return toFingerprintResponse({ health: "healthy" });
    if (this.#inflight !== undefined) return this.#inflight;
    const run = (async () => {
      try {
        const r = toFingerprintResponse(await compute());
        this.#lastFailure = undefined;
        return r;
      } catch (err) {
        return this.#failed(err);
      }
    })();
    // Let go of it in a reaction, not in the call's own `finally`: a fingerprint() that throws
    // synchronously settles the call before it is recorded here, and the record would then stay,
    // answering every later fingerprint with that failure without asking the driver again.
    this.#inflight = run;
    // On rejection too (a throwing logger, say): the record must go, and the derived promise must
    // not be an unhandled rejection, which ends the plugin. The caller handles `run`'s own.
    const release = () => {
      if (this.#inflight === run) this.#inflight = undefined;
    };
    void run.then(release, release);
    return run;
  }

  /** Resolves at the next update(); `cancel` stops waiting. */
  #nextUpdate(): { updated: Promise<void>; cancel: () => void } {
    let cancel!: () => void;
    const updated = new Promise<void>((resolve) => {
      const w = () => {
        this.#waiters.delete(w);
        resolve();
      };
      this.#waiters.add(w);
      cancel = () => this.#waiters.delete(w);
    });
    return { updated, cancel };
  }

  /** One Fingerprint stream. */
  async *stream(...signals: (AbortSignal | undefined)[]): AsyncGenerator<FingerprintResponse, void, undefined> {
    const waits = new StreamWaits(...signals);
    let poked = false;
    const onUpdate = (): void => {
      poked = true;
      waits.poke();
    };
    this.#waiters.add(onUpdate);
    // A driver's fingerprint() that never settles must not keep the stream open past its end
    // (cancelled, or the plugin shutting down); the listeners go with the stream. One promise per
    // wait, not one for the stream's life: every race on a promise that stays pending leaves a
    // reaction on it holding that race's result (a sent fingerprint), every interval, for days.
    const streamEnd = new AbortController();
    let onEnded: (() => void) | undefined;
    for (const s of signals) s?.addEventListener("abort", () => onEnded?.(), { once: true, signal: streamEnd.signal });
    try {
      let last: FingerprintResponse | undefined;
      let periodic = true;
      for (;;) {
        const seen = this.#version;
        // A driver's fingerprint() that hangs must not hold back what it pushes with update().
        const next = this.#nextUpdate();
        const ended = new Promise<"ended">((resolve) => {
          onEnded = () => resolve("ended");
          if (signals.some((s) => s?.aborted)) resolve("ended");
        });
        const got = await Promise.race([this.current(periodic), next.updated.then(() => undefined), ended]);
        onEnded = undefined;
        next.cancel();
        if (got === "ended" || signals.some((s) => s?.aborted)) return;
        let fp = got;
        if (fp === undefined) {
          // Updated while the driver's fingerprint() was still out: send what was pushed, if anything.
          if (this.#pushed === undefined) continue;
          fp = this.#pushed;
        }
        if (periodic || last === undefined || !equals(FingerprintResponseSchema, last, fp)) {
          last = fp;
          yield fp;
        }
        if (this.#version !== seen) {
          // An update arrived while we were computing or sending: act on it without waiting.
          periodic = false;
          continue;
        }
        poked = false;
        if (!(await waits.next(this.intervalMs))) return;
        periodic = !poked;
      }
    } finally {
      this.#waiters.delete(onUpdate);
      waits.close();
      streamEnd.abort();
    }
  }
}

function failed(err: unknown): FingerprintResponse {
  const message = errorText(err);
  return create(FingerprintResponseSchema, {
    health: FingerprintResponse_HealthState.UNHEALTHY,
    healthDescription: `fingerprint failed: ${message}`,
    err: message,
  });
}
