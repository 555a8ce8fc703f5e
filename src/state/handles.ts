// Which assignment each Forgejo job handle is bound to. A handle is a fresh UUID per job attempt,
// so a handle met under a second attempt is Forgejo's data gone wrong (a restore, a bug), and two
// runners would wait for one job: the second binding is refused. Kept beside the records (same TTL).
import type { KV } from "@nats-io/kv";
import { handleKey } from "../names.ts";
import { isWrongLastSequence } from "./kv.ts";

export interface HandleIndex {
  /** Binds `handle` to assignment `id`: true when it is bound to `id` (now or before), false when to another. */
  bind(handle: string, id: string): Promise<boolean>;
}

export function createHandleIndex(kv: KV): HandleIndex {
  return {
    async bind(handle, id) {
      try {
        await kv.create(handleKey(handle), id);
        return true;
      } catch (err) {
        if (!isWrongLastSequence(err)) throw err;
      }
      const bound = await kv.get(handleKey(handle));
      return bound?.string() === id;
    },
  };
}
