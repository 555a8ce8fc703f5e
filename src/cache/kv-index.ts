// The cache's index in the records bucket (index-store.ts): an entry per id, a name per (scope,
// version, key) created once (the first reserve wins, by KV create), a note per uploaded part.
// Lists read a key range in one stream-info request and its values in one batch.
import type { KV } from "@nats-io/kv";
import { base64url } from "../model/crypto.ts";
import type { NatsHandle } from "../nats/connection.ts";
import { CACHE_PREFIX, cacheEntriesOf, cacheEntryKey, cacheNameKey, cacheNamesOf, cachePartKey, cachePartsOf, idOfToken } from "../nats/names.ts";
import { casWrite, deleteAtRevision, isWrongLastSequence, readAllUnder, readJson, readManyJson } from "../state/kv.ts";
import type { CacheEntry, CacheIndex, Named } from "./index-store.ts";
import type { Uploaded } from "./parts.ts";

const encoder = new TextEncoder();
const text64 = (s: string) => base64url(encoder.encode(s));
const fromText64 = (s: string) => new TextDecoder().decode(Uint8Array.from(atob(s.replaceAll("-", "+").replaceAll("_", "/")), (c) => c.charCodeAt(0)));

export function kvCacheIndex(handle: NatsHandle, kv: KV, bucket: string): CacheIndex {
  const nameOf = (e: Pick<CacheEntry, "repo" | "scope" | "version" | "key">) => cacheNameKey(e.repo, text64(e.scope), e.version, text64(e.key));
  const create = async (key: string, value: unknown): Promise<boolean> => {
    try {
      await kv.create(key, encoder.encode(JSON.stringify(value)));
      return true;
    } catch (err) {
      if (isWrongLastSequence(err) || /exists/i.test((err as Error).message)) return false;
      throw err;
    }
  };
  const index: CacheIndex = {
    async reserve(entry) {
      for (let tries = 0; tries < 5; tries++) {
        // The entry first: a name never points at nothing; an entry whose name another took is removed.
        if (!(await create(cacheEntryKey(entry.repo, entry.id), entry))) return "id-taken";
        if (await create(nameOf(entry), { id: entry.id })) return { entry };
        await kv.delete(cacheEntryKey(entry.repo, entry.id));
        const holder = await readJson<{ id: number }>(kv, nameOf(entry));
        const taken = holder && (await index.get(entry.repo, holder.value.id));
        if (taken) return { taken: taken.value };
        // The name's entry is gone (an eviction meanwhile): its name goes, and the reserve is tried again.
        if (holder) await deleteAtRevision(kv, nameOf(entry), holder.revision);
      }
      throw new Error("the cache index could not reserve a name (contention)");
    },
    async get(repo, id) {
      return (await readJson<CacheEntry>(kv, cacheEntryKey(repo, id))) ?? undefined;
    },
    async update(entry, revision) {
      return (await casWrite(kv, cacheEntryKey(entry.repo, entry.id), entry, revision)) !== null;
    },
    async named(repo, scope, version): Promise<Named[]> {
      const prefix = cacheNamesOf(repo, text64(scope), version);
      const found = await readAllUnder<{ id: number }>(handle, bucket, prefix);
      return [...found].map(([k, v]) => ({ key: fromText64(k.slice(prefix.length + 1)), id: v.value.id }));
    },
    async entries(repo, ids) {
      const read = await readManyJson<CacheEntry>(
        handle,
        bucket,
        ids.map((id) => cacheEntryKey(repo, id)),
      );
      return new Map([...read.values()].map((v) => [v.value.id, v]));
    },
    async all(repo) {
      return [...(await readAllUnder<CacheEntry>(handle, bucket, cacheEntriesOf(repo))).values()].map((v) => v.value);
    },
    async repos() {
      const keys: string[] = [];
      for await (const k of await kv.keys(`${CACHE_PREFIX}.*.e.*`)) keys.push(k);
      return [...new Set(keys.map((k) => idOfToken(k.split(".")[1]!)))];
    },
    async putPart(repo, id, part) {
      await kv.put(cachePartKey(repo, id, part.part), encoder.encode(JSON.stringify(part)));
    },
    async parts(repo, id) {
      return [...(await readAllUnder<Uploaded>(handle, bucket, cachePartsOf(repo, id))).values()].map((v) => v.value);
    },
    async remove(entry) {
      const name = await readJson<{ id: number }>(kv, nameOf(entry));
      if (name?.value.id === entry.id) await deleteAtRevision(kv, nameOf(entry), name.revision);
      for (const p of await index.parts(entry.repo, entry.id)) await kv.purge(cachePartKey(entry.repo, entry.id, p.part));
      await kv.purge(cacheEntryKey(entry.repo, entry.id));
    },
  };
  return index;
}
