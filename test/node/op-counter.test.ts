// The counting proxy's classifier (scripts/ws-proxy.mjs), which the bench's cost figures are read
// from: each client operation counted once, by kind, payloads skipped even when they look like one.
import { describe, expect, it } from "vitest";
import { createOpCounter, kindOf } from "../../scripts/ws-proxy.mjs";

describe("the counting proxy", () => {
  it("names an operation by its subject: ack, pull, direct get, stream API, KV put, publish", () => {
    expect(kindOf("$JS.ACK.S.pod.1.2.3.4.5.0")).toBe("ack pod");
    expect(kindOf("$JS.API.CONSUMER.MSG.NEXT.S.pod")).toBe("pull pod");
    expect(kindOf("$JS.API.DIRECT.GET.KV_S_records.$KV.S_records.a.x")).toBe("direct get KV_S_records");
    expect(kindOf("$JS.API.STREAM.PURGE.S_slots_pod")).toBe("api STREAM.PURGE S_slots_pod");
    expect(kindOf("$KV.S_records.a.gitea-1-1")).toBe("kv put S_records");
    expect(kindOf("s.slots.pod.gitea-1-1")).toBe("publish s.slots.pod");
  });

  it("counts frames split anywhere, once each, and skips payloads that look like operations", () => {
    const trace: string[] = [];
    const counter = createOpCounter((subject: string) => trace.push(subject));
    const payload = "PUB fake 1\r\n";
    const stream = Buffer.from(
      [
        `PUB s.pod _INBOX.a ${payload.length}\r\n${payload}\r\n`,
        `HPUB $KV.S_records.a.x _INBOX.b 12 14\r\nNATS/1.0\r\n\r\nhi\r\n`,
        `PUB $JS.ACK.S.pod.1.1.1.1.1.0 4\r\n+ACK\r\n`,
        `SUB _INBOX.> 1\r\n`,
        `PUB $JS.API.CONSUMER.MSG.NEXT.S.pod _INBOX.c 2\r\n{}\r\n`,
      ].join(""),
    );
    for (let i = 0; i < stream.length; i += 7) counter.feed(stream.subarray(i, i + 7));
    expect(counter.counts).toMatchObject({ pub: 4, request: 3, sub: 1, pulls: 1 });
    expect(counter.counts.kinds).toEqual({ "publish s.pod": 1, "kv put S_records": 1, "ack pod": 1, "pull pod": 1 });
    expect(trace).toEqual(["s.pod", "$KV.S_records.a.x", "$JS.ACK.S.pod.1.1.1.1.1.0", "$JS.API.CONSUMER.MSG.NEXT.S.pod"]);
  });
});
