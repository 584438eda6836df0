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
  /** The stream's wait for its next event; a poke while it is not waiting finds the queue later. */
  waits: StreamWaits;
}

/** Fan-out of task events to the open TaskEvents streams. */
export class TaskEventHub implements TaskEventEmitter {
  readonly #subs = new Set<Subscriber>();
  readonly #backlog: DriverTaskEvent[] = [];
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
    const sub: Subscriber = { queue: this.#backlog.splice(0), waits: new StreamWaits(...signals) };
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
      // The last stream's undelivered events wait in the backlog for the next one. While another
      // stream is open it has them too (and may have delivered them): keeping them would repeat them.
      if (this.#subs.size === 0 && sub.queue.length > 0) this.#backlog.push(...sub.queue.splice(0).slice(-MAX_BACKLOG));
    }
  }
}
