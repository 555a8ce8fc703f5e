// Which gateway object serves an assignment: FNV-1a of its id, modulo the shard count. Every shard
// count from 1 to 64 stays in range and stable, ids whose hash has the top bit set included.
import { describe, expect, it } from "vitest";
import { shardOf } from "../../src/gateway/shards.ts";

/** FNV-1a 32-bit over UTF-16 code units, spelled out with BigInt: a second implementation to hold the first against. */
function fnv1a(key: string): bigint {
  let h = 0x811c9dc5n;
  for (let i = 0; i < key.length; i++) h = ((h ^ BigInt(key.charCodeAt(i))) * 0x01000193n) & 0xffffffffn;
  return h;
}

const ids = [...Array.from({ length: 400 }, (_, i) => `gitea-${1000 + i}-${1 + (i % 3)}`), "job-ü", "constructor", "__proto__", "a", "x".repeat(128)];

describe("gateway shards", () => {
  it("has ids with the hash's top bit set among those it checks", () => {
    expect(ids.filter((id) => fnv1a(id) >= 0x80000000n).length).toBeGreaterThan(50);
  });

  it("stays in [0, shards) and equals the hash modulo the count, for 1 to 64 shards", () => {
    for (let shards = 1; shards <= 64; shards++) {
      for (const id of ids) {
        const shard = shardOf(id, shards);
        expect(Number.isInteger(shard) && shard >= 0 && shard < shards, `${id} over ${shards}`).toBe(true);
        expect(shard).toBe(Number(fnv1a(id) % BigInt(shards)));
        expect(shardOf(id, shards)).toBe(shard);
      }
    }
  });

  it("spreads ids over the shards", () => {
    const used = new Set(ids.map((id) => shardOf(id, 8)));
    expect(used.size).toBe(8);
  });
});
