/**
 * Task events: the driver emits, Nomad listens on ONE TaskEvents stream for all tasks. Nomad
 * reopens the stream with backoff when it ends, so events emitted while no stream is open are kept
 * in a bounded backlog and delivered to the next one.
 */
import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { DriverTaskEventSchema, type DriverTaskEvent } from "@nomadkit/protocol/driver";
import type { Logger } from "../log/index.js";
import type { TaskEventEmitter, TaskEventInput } from "./types.js";
import { StreamWaits } from "./util.js";

/** Events kept while no stream is open, and per slow stream. */
const MAX_BACKLOG = 1024;

interface Subscriber {
  queue: DriverTaskEvent[];
  /** Number of the first event emitted after the stream opened: earlier ones never reached it. */
  since: number;
  /** The stream's wait for its next event; a poke while it is not waiting finds the queue later. */
  waits: StreamWaits;
}

/** Fan-out of task events to the open TaskEvents streams. */
export class TaskEventHub implements TaskEventEmitter {
  readonly #subs = new Set<Subscriber>();
  readonly #backlog: DriverTaskEvent[] = [];
  /** Each event's number, in emit order. */
  readonly #seq = new WeakMap<DriverTaskEvent, number>();
  #emitted = 0;
  #dropped = 0;

  constructor(
    private readonly lookup: (taskId: string) => { allocId: string; name: string } | undefined,
    private readonly logger: Logger,
  ) {}

  emit(event: TaskEventInput): void {
    const known = this.lookup(event.taskId);
    const msg = create(DriverTaskEventSchema, {
      taskId: event.taskId,
      allocId: event.allocId ?? known?.allocId ?? "",
      taskName: event.taskName ?? known?.name ?? "",
      timestamp: timestampFromDate(event.timestamp ?? new Date()),
      message: event.message,
      annotations: { ...(event.annotations ?? {}) },
    });
    this.#seq.set(msg, this.#emitted++);
    if (this.#subs.size === 0) {
      this.#push(this.#backlog, msg);
      return;
    }
    for (const s of this.#subs) {
      this.#push(s.queue, msg);
      s.waits.poke();
    }
  }

  #push(queue: DriverTaskEvent[], msg: DriverTaskEvent): void {
    queue.push(msg);
    if (queue.length > MAX_BACKLOG) {
      queue.shift();
      if (this.#dropped++ % 100 === 0) this.logger.warn("task events dropped: nobody is reading them", { dropped: this.#dropped });
    }
  }

  /** One TaskEvents stream; ends when any of `signals` aborts. */
  async *stream(...signals: (AbortSignal | undefined)[]): AsyncGenerator<DriverTaskEvent, void, undefined> {
    const sub: Subscriber = { queue: this.#backlog.splice(0), since: this.#emitted, waits: new StreamWaits(...signals) };
    this.#subs.add(sub);
    try {
      for (;;) {
        const next = sub.queue.shift();
        if (next !== undefined) {
          yield next;
          continue;
        }
        if (!(await sub.waits.next())) return;
      }
    } finally {
      sub.waits.close();
      this.#subs.delete(sub);
      // What this stream did not deliver goes to the streams that never had it (opened after it was
      // emitted: Nomad reopens its stream before the old one is gone), or waits in the backlog for
      // the next stream. A stream open before an event has it (and may have delivered it).
      const left = sub.queue.splice(0);
      if (this.#subs.size === 0) this.#backlog.push(...left.slice(-MAX_BACKLOG));
      else if (left.length > 0) {
        for (const other of this.#subs) {
          const missing = left.filter((e) => (this.#seq.get(e) ?? 0) < other.since);
          if (missing.length === 0) continue;
          other.queue.unshift(...missing);
          if (other.queue.length > MAX_BACKLOG) other.queue.splice(0, other.queue.length - MAX_BACKLOG);
          other.waits.poke();
        }
      }
    }
  }
}
