// In-memory stand-ins for the cache's index and blobs, with the contracts of kv-index.ts and R2
// (a part sent again replaces it; an object appears only at complete; list pages by cursor), for
// the fast tests of the cache's policy; cache-index.test holds both indexes to one contract.
import type { Blobs } from "../../src/cache/blobs.ts";
import type { CacheEntry, CacheIndex, Versioned } from "../../src/cache/index-store.ts";
import type { Uploaded } from "../../src/cache/parts.ts";

export function memoryIndex(): CacheIndex & { rows: Map<string, Versioned<CacheEntry>> } {
  const rows = new Map<string, Versioned<CacheEntry>>();
  const names = new Map<string, number>();
  const parts = new Map<string, Map<number, Uploaded>>();
  let seq = 0;
  const at = (repo: string, id: number) => `${repo}#${id}`;
  const nameOf = (e: CacheEntry) => JSON.stringify([e.repo, e.scope, e.version, e.key]);
  const index: CacheIndex & { rows: typeof rows } = {
    rows,
    async reserve(entry) {
      if (rows.has(at(entry.repo, entry.id))) return "id-taken";
      const held = names.get(nameOf(entry));
      const taken = held === undefined ? undefined : rows.get(at(entry.repo, held));
      if (taken) return { taken: structuredClone(taken.value) };
      rows.set(at(entry.repo, entry.id), { value: structuredClone(entry), revision: ++seq });
      names.set(nameOf(entry), entry.id);
      return { entry };
    },
    async get(repo, id) {
      const r = rows.get(at(repo, id));
      return r && structuredClone(r);
    },
    async update(entry, revision) {
      const r = rows.get(at(entry.repo, entry.id));
      if (!r || r.revision !== revision) return false;
      rows.set(at(entry.repo, entry.id), { value: structuredClone(entry), revision: ++seq });
      return true;
    },
    async named(repo, scope, version) {
      return [...names].flatMap(([n, id]) => {
        const [r, s, v, key] = JSON.parse(n) as string[];
        return r === repo && s === scope && v === version && rows.has(at(repo, id)) ? [{ key: key!, id }] : [];
      });
    },
    async entries(repo, ids) {
      return new Map(ids.flatMap((id) => (rows.has(at(repo, id)) ? [[id, structuredClone(rows.get(at(repo, id))!)] as const] : [])));
    },
    async all(repo) {
      return [...rows.values()].filter((r) => r.value.repo === repo).map((r) => structuredClone(r.value));
    },
    async repos() {
      return [...new Set([...rows.values()].map((r) => r.value.repo))];
    },
    async putPart(repo, id, part) {
      const key = at(repo, id);
      parts.set(key, (parts.get(key) ?? new Map()).set(part.part, part));
    },
    async parts(repo, id) {
      return [...(parts.get(at(repo, id))?.values() ?? [])];
    },
    async remove(entry) {
      if (names.get(nameOf(entry)) === entry.id) names.delete(nameOf(entry));
      parts.delete(at(entry.repo, entry.id));
      rows.delete(at(entry.repo, entry.id));
    },
  };
  return index;
}

const bytesOf = async (body: ReadableStream<Uint8Array>) => new Uint8Array(await new Response(body).arrayBuffer());

export function memoryBlobs(now: () => number = Date.now) {
  const objects = new Map<string, { bytes: Uint8Array; uploaded: number }>();
  const uploads = new Map<string, { key: string; parts: Map<number, { bytes: Uint8Array; etag: string }> }>();
  let n = 0;
  const blobs: Blobs & { objects: typeof objects; uploads: typeof uploads; fail?: string } = {
    objects,
    uploads,
    async start(key) {
      const id = `u${++n}`;
      uploads.set(id, { key, parts: new Map() });
      return id;
    },
    async putPart(key, upload, part, body, length) {
      if (blobs.fail === "putPart") throw new Error("R2 failed a put");
      const u = uploads.get(upload);
      if (!u || u.key !== key) throw new Error("no such upload");
      const bytes = await bytesOf(body);
      if (bytes.length !== length) throw new TypeError(`expected ${length} bytes, got ${bytes.length}`);
      const etag = `e${++n}`;
      u.parts.set(part, { bytes, etag });
      return etag;
    },
    async finish(key, upload, parts) {
      if (blobs.fail === "finish") throw new Error("R2 failed a complete");
      const u = uploads.get(upload);
      if (!u || u.key !== key) throw new Error("no such upload");
      const chunks = parts.map((p) => {
        const got = u.parts.get(p.part);
        if (!got || got.etag !== p.etag) throw new Error(`part ${p.part} is not the one uploaded`);
        return got.bytes;
      });
      const whole = new Uint8Array(chunks.reduce((s, c) => s + c.length, 0));
      let at = 0;
      for (const c of chunks) whole.set(c, (at += c.length) - c.length);
      objects.set(key, { bytes: whole, uploaded: now() });
      uploads.delete(upload);
    },
    async abort(_key, upload) {
      uploads.delete(upload);
    },
    async read(key, range) {
      if (blobs.fail === "read") throw new Error("R2 failed a get");
      const o = objects.get(key);
      if (!o) return undefined;
      const offset = range?.offset ?? 0;
      const length = range?.length ?? o.bytes.length - offset;
      return { body: new Response(o.bytes.slice(offset, offset + length)).body!, size: o.bytes.length, offset, length };
    },
    async size(key) {
      return objects.get(key)?.bytes.length;
    },
    async remove(keys) {
      for (const k of keys) objects.delete(k);
    },
    async list(prefix, cursor) {
      // Two a page, the cursor the last key given (as R2's, it holds while keys are deleted).
      const all = [...objects].filter(([k]) => k.startsWith(prefix) && (!cursor || k > cursor)).sort(([a], [b]) => (a < b ? -1 : 1));
      const page = all.slice(0, 2);
      return { keys: page.map(([key, o]) => ({ key, uploaded: o.uploaded })), cursor: all.length > 2 ? page[1]![0] : undefined };
    },
  };
  return blobs;
}
