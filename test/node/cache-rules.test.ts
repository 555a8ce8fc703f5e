// The cache's pure rules, each by its near misses: which entry a lookup restores (GitHub's
// matching), which scopes a job reads and writes (per forge), how chunks become R2 parts and when
// a commit holds, the Forgejo proxy's MAC (its own test vectors), and the capabilities.
import { describe, expect, it } from "vitest";
import { capability, forgejoSecret, signDownload, verifyCapability, verifyDownload } from "../../src/cache/capability.ts";
import { CLOCK_GRACE_S, forgejoMac, HEADERS, verifyForgejoMac } from "../../src/cache/forgejo-mac.ts";
import { CacheInputError, checkKey, chooseEntry, parseLookup, type Candidate } from "../../src/cache/match.ts";
import { commitProblem, MiB, parseContentRange, placeChunk } from "../../src/cache/parts.ts";
import { scopesOf } from "../../src/cache/scope.ts";

const V = "a".repeat(64);
const entry = (key: string, scope: string, committedAt: number, version = V): Candidate => ({ key, scope, committedAt, version });

describe("chooseEntry", () => {
  const entries = [
    entry("npm-linux-abc", "branch:main", 1),
    entry("npm-linux-def", "branch:main", 3),
    entry("npm-linux-0ld", "branch:main", 2),
    entry("npm-linux-feat", "branch:feat", 5),
    entry("npm-linux-abc", "branch:feat", 4, "b".repeat(64)),
  ];
  const lookup = (...keys: string[]) => ({ keys, version: V });

  it("an exact key first, then the newest entry a restore key starts; a miss is undefined", () => {
    const longer = [...entries, entry("npm-linux-abc-2", "branch:main", 9)];
    expect(chooseEntry(longer, lookup("npm-linux-abc"), ["branch:main"])?.key).toBe("npm-linux-abc");
    expect(chooseEntry(entries, lookup("npm-linux-abc", "npm-linux-"), ["branch:main"])?.key).toBe("npm-linux-abc");
    expect(chooseEntry(entries, lookup("npm-linux-xyz", "npm-linux-"), ["branch:main"])?.key).toBe("npm-linux-def");
    expect(chooseEntry(entries, lookup("npm-mac-xyz", "npm-mac-"), ["branch:main"])).toBeUndefined();
  });

  it("the job's own scope answers before the default branch's, with every key; another version is not a match", () => {
    expect(chooseEntry(entries, lookup("npm-linux-abc", "npm-linux-"), ["branch:feat", "branch:main"])?.key).toBe("npm-linux-feat");
    expect(chooseEntry(entries, lookup("npm-linux-abc"), ["branch:feat", "branch:main"])?.scope).toBe("branch:main");
    expect(chooseEntry(entries, lookup("npm-linux-feat"), ["branch:other"])).toBeUndefined();
  });

  it("keys are matched as written: case counts, and a restore key must be a prefix, not a part", () => {
    expect(chooseEntry(entries, lookup("NPM-linux-abc"), ["branch:main"])).toBeUndefined();
    expect(chooseEntry(entries, lookup("linux-"), ["branch:main"])).toBeUndefined();
  });

  it("parses the client's keys and refuses what it would: over 10, over 512 characters, a comma, an empty one, no version", () => {
    expect(parseLookup("a,b", V)).toEqual({ keys: ["a", "b"], version: V });
    expect(() => parseLookup(Array.from({ length: 11 }, (_, i) => `k${i}`).join(","), V)).toThrow("at most 10 keys, not 11");
    expect(() => parseLookup("x".repeat(513), V)).toThrow("keys[0]: at most 512 characters, not 513");
    expect(parseLookup("x".repeat(512), V).keys[0]).toHaveLength(512);
    expect(() => parseLookup("a,,b", V)).toThrow("keys[1] is required");
    expect(() => parseLookup("a", "xyz")).toThrow(CacheInputError);
    expect(() => checkKey("a,b")).toThrow("a key may not contain a comma");
  });
});

describe("scopesOf", () => {
  it("Gitea, a branch's run: reads its branch then the default branch, writes its branch", () => {
    expect(scopesOf({ forge: "gitea", runId: 7, headBranch: "feat", defaultBranch: "main" })).toEqual({
      read: ["branch:feat", "branch:main"],
      write: "branch:feat",
    });
    expect(scopesOf({ forge: "gitea", runId: 7, headBranch: "main", defaultBranch: "main" })).toEqual({ read: ["branch:main"], write: "branch:main" });
  });

  it("Gitea, a pull request's or a tag's run (no head branch): writes its run's scope, never a branch's; reads it, then the default branch", () => {
    const pr = scopesOf({ forge: "gitea", runId: 7, headBranch: "", defaultBranch: "main" });
    expect(pr).toEqual({ read: ["run:7", "branch:main"], write: "run:7" });
    expect(scopesOf({ forge: "gitea", runId: 7 })).toEqual({ read: ["run:7"], write: "run:7" });
  });

  it("Forgejo, as its own server: a pull request's isolation key writes apart and reads the shared entries after its own", () => {
    expect(scopesOf({ forge: "forgejo", runId: 7, isolationKey: "refs/pull/12/head" })).toEqual({
      read: ["isolated:refs/pull/12/head", "shared"],
      write: "isolated:refs/pull/12/head",
    });
    expect(scopesOf({ forge: "forgejo", runId: 7, isolationKey: "" })).toEqual({ read: ["shared"], write: "shared" });
  });
});

describe("placeChunk and commitProblem", () => {
  const S = 32 * MiB;
  const size = 3 * S + 1000;
  it("parses Content-Range as the client writes it; refuses the rest", () => {
    expect(parseContentRange("bytes 0-33554431/*")).toEqual({ start: 0, end: S - 1 });
    expect(parseContentRange("bytes 5-9/10")).toEqual({ start: 5, end: 9 });
    for (const bad of [undefined, "bytes 9-5/*", "bytes=0-1/*", "bytes 0-1", "bytes -1-5/*"]) expect(() => parseContentRange(bad)).toThrow(CacheInputError);
  });

  it("places the client's 32 MiB chunks in any order; the short last one waits until a full one fixed the part size", () => {
    expect(placeChunk({ size }, { start: 3 * S, end: size - 1 })).toEqual({ wait: expect.stringContaining("part size") });
    expect(placeChunk({ size }, { start: 2 * S, end: 3 * S - 1 })).toEqual({ part: 3, partSize: S });
    expect(placeChunk({ size, partSize: S }, { start: 3 * S, end: size - 1 })).toEqual({ part: 4, partSize: S });
    expect(placeChunk({ size, partSize: S }, { start: 0, end: S - 1 })).toEqual({ part: 1, partSize: S });
  });

  it("refuses chunks off the cut: past the reserved size, off a boundary, of another length, under R2's 5 MiB", () => {
    expect(() => placeChunk({ size, partSize: S }, { start: 3 * S, end: size })).toThrow("past the reserved cacheSize");
    expect(() => placeChunk({ size, partSize: S }, { start: S + 1, end: 2 * S })).toThrow("not on a");
    expect(() => placeChunk({ size, partSize: S }, { start: S, end: 2 * S - 2 })).toThrow("chunks are");
    expect(() => placeChunk({ size: 12 * MiB }, { start: 0, end: 4 * MiB - 1 })).toThrow("set CACHE_UPLOAD_CHUNK_SIZE to at least 5 (MiB)");
    expect(placeChunk({ size: 12 * MiB }, { start: 0, end: 5 * MiB - 1 })).toEqual({ part: 1, partSize: 5 * MiB });
  });

  it("a small archive in one chunk is fine; without a reserved size (BuildKit), a second part shows the first was too small", () => {
    expect(placeChunk({ size: 1000 }, { start: 0, end: 999 })).toEqual({ part: 1, partSize: 1000 });
    expect(placeChunk({}, { start: 0, end: 999 })).toEqual({ part: 1, partSize: 1000 });
    expect(() => placeChunk({ partSize: 1000 }, { start: 1000, end: 1999 })).toThrow("under R2's 5 MiB");
    expect(placeChunk({}, { start: S, end: 2 * S - 1 })).toEqual({ wait: expect.any(String) });
    expect(placeChunk({ partSize: S }, { start: S, end: S + 99 })).toEqual({ part: 2, partSize: S });
  });

  it("a commit holds only for parts 1..n once each, every one full but the last, summing to the reserved size", () => {
    const parts = [1, 2, 3].map((part) => ({ part, size: S, etag: `e${part}` })).concat({ part: 4, size: 1000, etag: "e4" });
    expect(commitProblem(parts, S, size, size)).toBeUndefined();
    expect(commitProblem(parts, S, size + 1, size)).toContain("not the reserved cacheSize");
    expect(commitProblem(parts.slice(1), S, size, size)).toContain("do not cover");
    expect(commitProblem([...parts.slice(0, 3), { part: 4, size: 999, etag: "x" }], S, size, size)).toBe("chunk 4 holds 999 bytes, not 1000");
    expect(commitProblem([parts[0]!, { ...parts[0]!, part: 3 }, parts[2]!, parts[3]!], S, size, size)).toContain("do not cover");
    expect(commitProblem([], undefined, 10, 10)).toBe("no chunk was uploaded");
    expect(commitProblem([], undefined, 0, undefined)).toBeUndefined();
  });
});

describe("the Forgejo proxy's MAC", () => {
  const secret = "this is my cool secret string :3";
  it("matches forgejo-runner's mac_test.go vectors", async () => {
    expect(await forgejoMac(secret, "org/reponame", "42", "1337", "")).toBe("4754474b21329e8beadd2b4054aa4be803965d66e710fa1fee091334ed804f29");
    expect(await forgejoMac(secret, "org/reponame", "42", "1337", "refs/pull/12/head")).toBe(
      "9ca8f4cb5e1b083ee8cd215215bc00f379b28511d3ef7930bf054767de34766d",
    );
  });

  const signed = async (over: Record<string, string> = {}, key = "") => {
    const h = { [HEADERS.repo]: "org/reponame", [HEADERS.run]: "42", [HEADERS.timestamp]: "1337", ...over };
    const mac = await forgejoMac(secret, h[HEADERS.repo]!, h[HEADERS.run]!, h[HEADERS.timestamp]!, key);
    return new Headers({ ...h, ...(key ? { [HEADERS.isolationKey]: key } : {}), [HEADERS.mac]: mac });
  };
  const now = 1337_000;

  it("holds for its own headers, and names the isolation key it binds", async () => {
    expect(await verifyForgejoMac(await signed(), secret, now)).toEqual({ repo: "org/reponame", runId: "42", isolationKey: "" });
    expect(await verifyForgejoMac(await signed({}, "refs/pull/12/head"), secret, now)).toMatchObject({ isolationKey: "refs/pull/12/head" });
  });

  it("near misses: another repository, a dropped or added isolation key, a secret one character off, upper-case hex, a future timestamp", async () => {
    const good = await signed();
    const other = new Headers(good);
    other.set(HEADERS.repo, "org/reponamf");
    expect(await verifyForgejoMac(other, secret, now)).toBe("mac");
    const dropped = await signed({}, "refs/pull/12/head");
    dropped.delete(HEADERS.isolationKey);
    expect(await verifyForgejoMac(dropped, secret, now)).toBe("mac");
    const added = new Headers(good);
    added.set(HEADERS.isolationKey, "refs/pull/12/head");
    expect(await verifyForgejoMac(added, secret, now)).toBe("mac");
    expect(await verifyForgejoMac(good, `${secret.slice(0, -1)}4`, now)).toBe("mac");
    const upper = new Headers(good);
    upper.set(HEADERS.mac, good.get(HEADERS.mac)!.toUpperCase());
    expect(await verifyForgejoMac(upper, secret, now)).toBe("mac");
    const ahead = String(1337 + CLOCK_GRACE_S);
    expect(await verifyForgejoMac(await signed({ [HEADERS.timestamp]: ahead }), secret, now)).toMatchObject({ runId: "42" });
    expect(await verifyForgejoMac(await signed({ [HEADERS.timestamp]: String(1338 + CLOCK_GRACE_S) }), secret, now)).toBe("timestamp");
    const bare = new Headers(good);
    bare.delete(HEADERS.mac);
    expect(await verifyForgejoMac(bare, secret, now)).toBe("missing");
  });
});

describe("capabilities", () => {
  const key = new Uint8Array(32).fill(3);
  const other = new Uint8Array(32).fill(4);
  const holder = { assignment: "gitea-1187-1", incarnation: "k3x" };

  it("a capability names its holder under its key only; one character off, another incarnation or key, is nothing", async () => {
    const cap = await capability(key, holder);
    expect(await verifyCapability(key, cap)).toEqual(holder);
    expect(await verifyCapability(other, cap)).toBeUndefined();
    expect(await verifyCapability(key, `${cap.slice(0, -1)}${cap.endsWith("A") ? "B" : "A"}`)).toBeUndefined();
    const mac = cap.split("~")[2];
    expect(await verifyCapability(key, `gitea-1187-1~k3y~${mac}`)).toBeUndefined();
    expect(await verifyCapability(key, `gitea-1188-1~k3x~${mac}`)).toBeUndefined();
    expect(await verifyCapability(key, `${cap}~x`)).toBeUndefined();
    expect(await verifyCapability(key, "constructor")).toBeUndefined();
  });

  it("a Forgejo secret is the job's own: another assignment or incarnation has another", async () => {
    const s = await forgejoSecret(key, holder);
    expect(s).toMatch(/^[0-9a-f]{64}$/);
    expect(await forgejoSecret(key, { ...holder, incarnation: "k3y" })).not.toBe(s);
    expect(await forgejoSecret(key, { ...holder, assignment: "gitea-1187-2" })).not.toBe(s);
    expect(await forgejoSecret(key, holder)).toBe(s);
  });

  it("a download URL holds until it expires, for its entry only", async () => {
    const grant = { ...holder, entry: "e42", expires: 2_000 };
    const url = await signDownload(key, grant);
    expect(await verifyDownload(key, url, 1_999_999)).toEqual(grant);
    expect(await verifyDownload(key, url, 2_000_000)).toBeUndefined();
    expect(await verifyDownload(key, url.replace("e42~", "e43~"), 1_000)).toBeUndefined();
    expect(await verifyDownload(key, url.replace("~2000~", "~9999~"), 1_000)).toBeUndefined();
  });
});
