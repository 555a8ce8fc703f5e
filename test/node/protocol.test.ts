// What a gateway call answers when NATS does not answer in time: the work may still complete, so
// no such answer may claim that nothing happened, and each says why trying again is safe.
import { describe, expect, it } from "vitest";
import { Unavailable } from "../../src/model/errors.ts";
import { toWire } from "../../src/gateway/protocol.ts";
import { NatsUnavailable } from "../../src/nats/connection.ts";
import { PATH_OPS } from "../../src/app/request-path.ts";

describe("gateway answers after a deadline", () => {
  it("never say that nothing was queued, and name NATS", () => {
    for (const op of PATH_OPS) {
      const wire = toWire(new NatsUnavailable("NATS did not answer within the call's deadline"), op);
      expect(wire.kind, op).toBe("Unavailable");
      expect(wire.message, op).toMatch(/^NATS /);
      expect(wire.message, op).not.toMatch(/nothing was (queued|recorded)|was not recorded/);
    }
    expect(toWire(new NatsUnavailable("x"), "publish").message).toMatch(/may still be queued\. Retrying with the same id is safe/);
    expect(toWire(new NatsUnavailable("x"), "webhook").message).toMatch(/may still be queued\. Redelivering it is safe/);
    expect(toWire(new NatsUnavailable("x"), "claim").message).toMatch(/may still be recorded\. Retrying the same request is safe/);
  });

  it("pass a domain answer through as it is: a Gitea that did not answer keeps its own words", () => {
    const gitea = new Unavailable("Gitea could not confirm that job 7 is still queued (timed out); nothing was queued, the sweep will find it if it is");
    expect(toWire(gitea, "webhook")).toEqual({ kind: "Unavailable", message: gitea.message });
  });
});
