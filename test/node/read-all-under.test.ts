// readAllUnder (state/kv.ts): every live key under a prefix, in one request (a multi_last batch on
// the wildcard), against the real nats-server. Near misses: a sibling prefix that starts alike, a
// deleted key, a key updated since, and more keys than the server answers in one batch (its 413:
// then listed and read in batches, nothing lost).
import { describe, expect, inject, it } from "vitest";
import { recordsBucket } from "../../src/nats/names.ts";
import { withNats, type NatsHandle } from "../../src/nats/connection.ts";
import { bindBucket, readAllUnder } from "../../src/state/kv.ts";
import { provisionEnv, testEnv } from "../harness/env.ts";

const nats = inject("natsWsUrl");
const backendUrl = inject("backendUrl");

/** The handle with its requests counted by API subject (publishes with a reply, and requests). */
function counting(h: NatsHandle) {
  const asked: string[] = [];
  const nc = new Proxy(h.nc, {
    get(target, prop, receiver) {
      const value: unknown = Reflect.get(target, prop, receiver);
      if (prop === "publish" || prop === "request")
        return (subject: string, ...rest: unknown[]) => {
          if (subject.startsWith("$JS.API.")) asked.push(subject.split(".").slice(2, 4).join("."));
          return (value as (...a: unknown[]) => unknown).call(target, subject, ...rest);
        };
      return typeof value === "function" ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
  return { handle: { ...h, nc } as NatsHandle, asked };
}

describe("readAllUnder", () => {
  it("reads every live key under the prefix in one request, and nothing of a prefix that starts alike", async () => {
    const config = await provisionEnv(testEnv(nats, backendUrl));
    const bucket = recordsBucket({ stream: config.stream, subjectBase: config.subjectBase });
    await withNats(config, async (h) => {
      const kv = await bindBucket(h, bucket);
      await kv.put("w.p.0", JSON.stringify({ n: 0 }));
      const first = await kv.put("w.p.1", JSON.stringify({ n: 1 }));
      const second = await kv.put("w.p.1", JSON.stringify({ n: 11 }));
      await kv.put("w.q.0", JSON.stringify({ n: 2 }));
      await kv.put("w.p.2", JSON.stringify({ n: 3 }));
      await kv.delete("w.p.2");
      await kv.put("wx.p.0", JSON.stringify({ n: 4 }));
      await kv.put("w", JSON.stringify({ n: 5 }));
      const { handle, asked } = counting(h);
      const found = await readAllUnder<{ n: number }>(handle, bucket, "w");
      expect(Object.fromEntries([...found].map(([k, v]) => [k, v.value.n]))).toEqual({ "w.p.0": 0, "w.p.1": 11, "w.q.0": 2 });
      expect(found.get("w.p.1")?.revision).toBe(second);
      expect(second).toBeGreaterThan(first);
      expect(asked).toEqual(["DIRECT.GET"]);
      expect((await readAllUnder(handle, bucket, "none")).size).toBe(0);
    });
  });

  it("more keys than one batch answers: listed, then read in batches, every one", async () => {
    const config = await provisionEnv(testEnv(nats, backendUrl));
    const bucket = recordsBucket({ stream: config.stream, subjectBase: config.subjectBase });
    await withNats(config, async (h) => {
      const kv = await bindBucket(h, bucket);
      const many = 1_100;
      for (let i = 0; i < many; i += 100) await Promise.all(Array.from({ length: 100 }, (_, k) => kv.put(`m.${i + k}`, JSON.stringify({ n: i + k }))));
      const { handle, asked } = counting(h);
      const found = await readAllUnder<{ n: number }>(handle, bucket, "m");
      expect(found.size).toBe(many);
      expect(found.get("m.1099")?.value.n).toBe(1099);
      expect(asked[0]).toBe("DIRECT.GET");
      expect(asked).toContain("STREAM.INFO");
    });
  });
});
