// Which runner each Forgejo job handle is bound to: the assignment of the job's own runner, or of
// the warm runner it was given to. Whoever binds first decides, so two pollers (or one that lost its
// storage) never give one job attempt two runners. A handle is a fresh UUID per job attempt, so a
// handle met under a second attempt is Forgejo's data gone wrong (a restore, a bug): the second
// binding is refused. Kept beside the records (same TTL).
import type { KV } from "@nats-io/kv";
import { handleKey } from "../nats/names.ts";
import { isWrongLastSequence } from "./kv.ts";

export interface HandleIndex {
  /**
   * Binds `handle` to assignment `id`: the one runner that runs its job attempt (the job's own, or
   * a warm runner's). With `from`, moves it from there (a runner this caller bound it to a moment
   * ago and could not keep). Returns the id it is bound to after: `id`, or another that holds it
   * (empty when it could not be read).
   */
  bind(handle: string, id: string, from?: string): Promise<string>;
  /** When `handle` was bound where it is now (epoch ms); undefined when it is not bound. */
  since(handle: string): Promise<number | undefined>;
}

export function createHandleIndex(kv: KV): HandleIndex {
  return {
    async bind(handle, id, from) {
      const key = handleKey(handle);
      try {
        await kv.create(key, id);
        return id;
      } catch (err) {
        if (!isWrongLastSequence(err)) throw err;
      }
      const bound = await kv.get(key);
      const holder = bound?.string() ?? "";
      if (holder !== from || from === undefined || !bound) return holder;
      try {
        await kv.update(key, id, bound.revision);
        return id;
      } catch (err) {
        if (!isWrongLastSequence(err)) throw err;
        return (await kv.get(key))?.string() ?? "";
      }
    },
    async since(handle) {
      return (await kv.get(handleKey(handle)))?.created.getTime();
    },
  };
}
