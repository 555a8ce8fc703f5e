// Teardowns that failed, kept until the cron tick retries them. With the Gitea integration the
// runner list is this to-do list (the sweep deletes what is still listed); without it, nothing
// else remembers a workload left behind, and the caller must not be the one who retries (a
// completion that changes nothing tears nothing down). Kept in the records bucket under their
// own prefix: a tick that finds none pays one request.
import type { KV } from "@nats-io/kv";
import { teardownKey, TEARDOWN_PREFIX, type Backend } from "../nats/names.ts";
import type { NatsHandle } from "../nats/connection.ts";
import { isWrongLastSequence, readAllUnder } from "./kv.ts";

export interface PendingTeardown {
  id: string;
  backend: Backend;
  /** Failed at first then (ISO time). */
  since: string;
  /** Its Gitea runner, when the sweep's runner list does not show it (registered at another scope). */
  runner?: { id: number; scope?: string };
}

/** Teardowns to retry. `add` is idempotent per id; `list` returns at most `limit`, oldest first. */
export interface TeardownList {
  add(t: PendingTeardown): Promise<void>;
  list(limit: number): Promise<PendingTeardown[]>;
  done(id: string): Promise<void>;
}

export function createTeardownList(handle: NatsHandle, kv: KV, bucket: string): TeardownList {
  return {
    async add(t) {
      await kv.create(teardownKey(t.id), JSON.stringify(t)).catch((err: unknown) => {
        // Already listed: the first failure's time stands.
        if (!isWrongLastSequence(err)) throw err;
      });
    },
    async list(limit) {
      const found = await readAllUnder<PendingTeardown>(handle, bucket, TEARDOWN_PREFIX);
      return [...found.values()]
        .map((v) => v.value)
        .sort((a, b) => a.since.localeCompare(b.since))
        .slice(0, limit);
    },
    async done(id) {
      await kv.purge(teardownKey(id));
    },
  };
}
