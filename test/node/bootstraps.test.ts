// One-time bootstraps (state/bootstraps.ts) against the real nats-server: a VM's token gives its
// payload once; a second take, a racing take, a token one character off, another assignment's id,
// an expired token and a malformed one get nothing; the payload is sealed at rest; and a payload
// sealed before a key rotation still opens with the previous key.
import { describe, expect, inject, it } from "vitest";
import { loadConfig } from "../../src/app/config.ts";
import { withNats } from "../../src/nats/connection.ts";
import { recordsBucket } from "../../src/nats/names.ts";
import { bindBucket } from "../../src/state/kv.ts";
import { createBootstraps } from "../../src/state/bootstraps.ts";
import { provisionEnv, testEnv } from "../harness/env.ts";

const KEY = new Uint8Array(32).fill(1);
const NEW_KEY = new Uint8Array(32).fill(2);
const SECRET = "runner-token-that-must-not-be-stored-in-clear";

async function scene(fn: (kv: Awaited<ReturnType<typeof bindBucket>>, clock: { t: number }) => Promise<void>) {
  const config = await provisionEnv(testEnv(inject("natsWsUrl"), "http://127.0.0.1:9"));
  await withNats(
    loadConfig(testEnv(inject("natsWsUrl"), "http://127.0.0.1:9", { ASSIGNMENT_STREAM: config.stream, ASSIGNMENT_SUBJECT_BASE: config.subjectBase })),
    async (h) => fn(await bindBucket(h, recordsBucket(config)), { t: 1_000_000 }),
  );
}
const offByOne = (t: string) => t.slice(0, -1) + (t.endsWith("A") ? "B" : "A");

describe("one-time bootstraps", () => {
  it("gives the payload once; near misses get nothing and spend nothing", async () => {
    await scene(async (kv, clock) => {
      const store = createBootstraps(kv, KEY, () => clock.t);
      const token = await store.issue("gitea-7-1", { runner: { token: SECRET }, claimToken: "c" }, 600_000);
      expect(token).toMatch(/^[A-Za-z0-9_-]{43}$/);
      for (const near of [offByOne(token), `${token}A`, token.slice(0, -1), "constructor", "../boot", ""])
        expect(await store.take("gitea-7-1", near)).toBeUndefined();
      expect(await store.take("gitea-8-1", token)).toBeUndefined();
      expect(await store.take("gitea-7-1", token)).toEqual({ runner: { token: SECRET }, claimToken: "c" });
      expect(await store.take("gitea-7-1", token)).toBeUndefined();
    });
  });

  it("of 20 racing takes, exactly one gets the payload", async () => {
    await scene(async (kv, clock) => {
      const store = createBootstraps(kv, KEY, () => clock.t);
      const token = await store.issue("gitea-9-1", { n: 1 }, 600_000);
      const got = await Promise.all(Array.from({ length: 20 }, () => store.take("gitea-9-1", token)));
      expect(got.filter((g) => g !== undefined)).toEqual([{ n: 1 }]);
    });
  });

  it("a derived token is the same for the same attempt and key, another for another; once spent or revoked it is never issued again", async () => {
    await scene(async (kv, clock) => {
      const store = createBootstraps(kv, KEY, () => clock.t);
      const first = await store.issue("gitea-11-1", { n: 1 }, 600_000, "ec2:0");
      expect(await store.issue("gitea-11-1", { n: 2 }, 600_000, "ec2:0")).toBe(first);
      // Near misses: the next attempt, another assignment, another key.
      expect(await store.issue("gitea-11-1", { n: 1 }, 600_000, "ec2:1")).not.toBe(first);
      expect(await store.issue("gitea-12-1", { n: 1 }, 600_000, "ec2:0")).not.toBe(first);
      expect(await createBootstraps(kv, NEW_KEY, () => clock.t).issue("gitea-11-1", { n: 1 }, 600_000, "ec2:0")).not.toBe(first);
      // Its key is known before it is issued: what a note names first.
      expect(await store.derivedKey("gitea-11-1", "ec2:0")).toBe(await store.keyOf(first));
      expect(await store.derivedKey("gitea-11-1", "ec2:1")).not.toBe(await store.keyOf(first));
      // The entry first issued is the one kept.
      expect(await store.take("gitea-11-1", first)).toEqual({ n: 1 });
      expect(await store.issue("gitea-11-1", { n: 1 }, 600_000, "ec2:0")).toBe(first);
      expect(await store.take("gitea-11-1", first)).toBeUndefined();
      const revoked = await store.issue("gitea-11-1", { n: 3 }, 600_000, "ec2:2");
      expect(await store.revoke(await store.keyOf(revoked))).toBe(true);
      expect(await store.revoke(await store.keyOf(revoked))).toBe(false);
      await store.issue("gitea-11-1", { n: 3 }, 600_000, "ec2:2");
      expect(await store.take("gitea-11-1", revoked)).toBeUndefined();
    });
  });

  it("an expired token gets nothing, and is spent; the payload is sealed at rest", async () => {
    await scene(async (kv, clock) => {
      const store = createBootstraps(kv, KEY, () => clock.t);
      const token = await store.issue("gitea-10-1", { runner: { token: SECRET } }, 60_000);
      const keys: string[] = [];
      for await (const k of await kv.keys("boot.>")) keys.push(k);
      const raw = await kv.get(keys.find((k) => k.startsWith("boot."))!);
      expect(raw?.string()).not.toContain(SECRET);
      expect(raw?.string()).not.toContain(token);
      clock.t += 60_001;
      expect(await store.take("gitea-10-1", token)).toBeUndefined();
      clock.t -= 60_001;
      expect(await store.take("gitea-10-1", token)).toBeUndefined();
    });
  });

  it("a payload sealed before a key rotation opens with the previous key, not without it", async () => {
    await scene(async (kv, clock) => {
      const before = createBootstraps(kv, KEY, () => clock.t);
      const a = await before.issue("gitea-11-1", { n: 11 }, 600_000);
      const b = await before.issue("gitea-12-1", { n: 12 }, 600_000);
      expect(await createBootstraps(kv, NEW_KEY, () => clock.t, KEY).take("gitea-11-1", a)).toEqual({ n: 11 });
      await expect(createBootstraps(kv, NEW_KEY, () => clock.t).take("gitea-12-1", b)).rejects.toThrow();
      // Not spent by the failed open: with the previous key set again, it opens.
      expect(await createBootstraps(kv, NEW_KEY, () => clock.t, KEY).take("gitea-12-1", b)).toEqual({ n: 12 });
    });
  });
});
