// One contract for both indexes of the cache (index-store.ts): the NATS KV one on a real
// nats-server, and the in-memory one the fast tests stand on. One name has one entry (the first
// reserve wins, at once too), writes are compare-and-set, names come back as written whatever
// they hold, and a removed entry takes its name and its parts' notes with it.
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { kvCacheIndex } from "../../src/cache/kv-index.ts";
import type { CacheEntry, CacheIndex } from "../../src/cache/index-store.ts";
import { closeNats, openNats, type NatsHandle } from "../../src/nats/connection.ts";
import { recordsBucket } from "../../src/nats/names.ts";
import { bindBucket } from "../../src/state/kv.ts";
import { memoryIndex } from "../harness/cache-memory.ts";
import { provisionEnv, testEnv } from "../harness/env.ts";

let handle: NatsHandle;
let bucket: string;
beforeAll(async () => {
  const config = await provisionEnv(testEnv(inject("natsWsUrl"), "http://127.0.0.1:9"));
  handle = await openNats(config);
  bucket = recordsBucket(config);
});
afterAll(() => closeNats(handle.nc));

const V = "d".repeat(64);
let n = 100;
const entry = (over: Partial<CacheEntry> = {}): CacheEntry => ({
  id: ++n,
  repo: "org/app",
  scope: "branch:main",
  key: "k",
  version: V,
  state: "reserved",
  upload: "",
  holder: "gitea-1-1",
  reservedAt: 1,
  usedAt: 1,
  ...over,
});

describe.each([
  ["nats kv", async (): Promise<CacheIndex> => kvCacheIndex(handle, await bindBucket(handle, bucket), bucket)],
  ["memory", async (): Promise<CacheIndex> => memoryIndex()],
])("the cache index (%s)", (_name, make) => {
  it("one name, one entry: a second reserve is answered the first; an id already used is said", async () => {
    const index = await make();
    const repo = `org/a${n}`;
    const first = entry({ repo });
    expect(await index.reserve(first)).toEqual({ entry: first });
    expect(await index.reserve(entry({ repo }))).toEqual({ taken: first });
    expect(await index.reserve({ ...first, key: "other" })).toBe("id-taken");
    // Near misses: another version, scope or repository is another name.
    for (const over of [{ version: "e".repeat(64) }, { scope: "branch:dev" }, { repo: `${repo}x` }])
      expect(await index.reserve(entry({ repo, ...over }))).toHaveProperty("entry");
  });

  it("reserves of one name at once: exactly one entry", async () => {
    const index = await make();
    const repo = `org/b${n}`;
    const answers = await Promise.all(Array.from({ length: 6 }, () => index.reserve(entry({ repo, key: "race" }))));
    const won = answers.filter((a) => typeof a === "object" && "entry" in a);
    expect(won).toHaveLength(1);
    expect((await index.all(repo)).map((e) => e.key)).toEqual(["race"]);
  });

  it("updates are compare-and-set: a stale revision writes nothing", async () => {
    const index = await make();
    const e = entry({ repo: `org/c${n}` });
    await index.reserve(e);
    const read = (await index.get(e.repo, e.id))!;
    expect(await index.update({ ...read.value, partSize: 5 }, read.revision)).toBe(true);
    expect(await index.update({ ...read.value, partSize: 6 }, read.revision)).toBe(false);
    expect((await index.get(e.repo, e.id))?.value.partSize).toBe(5);
  });

  it("names come back as written: dots, slashes, commas' neighbours, unicode, `constructor`; within their scope and version", async () => {
    const index = await make();
    const repo = `org/d${n}`;
    const keys = ["npm.linux/x64-ä", "constructor", "a b*c>d", "x".repeat(512)];
    for (const key of keys) await index.reserve(entry({ repo, key, scope: "branch:feat/x.y" }));
    await index.reserve(entry({ repo, key: "elsewhere", scope: "branch:feat" }));
    const named = await index.named(repo, "branch:feat/x.y", V);
    expect(named.map((x) => x.key).sort()).toEqual([...keys].sort());
    expect(await index.named(repo, "branch:feat/x.y", "e".repeat(64))).toEqual([]);
    const found = await index.entries(
      repo,
      named.map((x) => x.id),
    );
    expect([...found.values()].map((v) => v.value.key).sort()).toEqual([...keys].sort());
    expect(await index.repos()).toContain(repo);
  });

  it("a part sent again replaces its note; a removed entry takes its name and parts, and the name is free again", async () => {
    const index = await make();
    const e = entry({ repo: `org/e${n}` });
    await index.reserve(e);
    await index.putPart(e.repo, e.id, { part: 1, size: 5, etag: "a" });
    await index.putPart(e.repo, e.id, { part: 1, size: 5, etag: "b" });
    await index.putPart(e.repo, e.id, { part: 2, size: 3, etag: "c" });
    expect((await index.parts(e.repo, e.id)).sort((a, b) => a.part - b.part)).toEqual([
      { part: 1, size: 5, etag: "b" },
      { part: 2, size: 3, etag: "c" },
    ]);
    await index.remove(e);
    expect(await index.get(e.repo, e.id)).toBeUndefined();
    expect(await index.parts(e.repo, e.id)).toEqual([]);
    expect(await index.named(e.repo, e.scope, V)).toEqual([]);
    expect(await index.reserve(entry({ repo: e.repo }))).toHaveProperty("entry");
  });

  it("removing an entry whose name another holds leaves the other's name", async () => {
    const index = await make();
    const repo = `org/f${n}`;
    const a = entry({ repo });
    await index.reserve(a);
    await index.remove(a);
    const b = entry({ repo });
    await index.reserve(b);
    await index.remove(a);
    expect((await index.named(repo, a.scope, V)).map((x) => x.id)).toEqual([b.id]);
  });
});
