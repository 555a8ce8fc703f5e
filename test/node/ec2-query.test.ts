// The EC2 query protocol as the driver writes it (src/backends/ec2/query.ts) and as the fake reads
// it back (scripts/fake-ec2-rules.mjs), two readings of the service model written apart: they agree
// on a whole RunInstances, and each refuses what the model does not allow, naming the field.
import { describe, expect, it } from "vitest";
import { checkRequest, encodeRequest } from "../../src/backends/ec2/query.ts";
import { readDescribeInstances, readError } from "../../src/backends/ec2/xml.ts";
import { attemptsOf, checkTemplate, clientToken, runBody } from "../../src/backends/ec2/run-body.ts";
import { answer, errorXml, readRequest } from "../../scripts/fake-ec2-rules.mjs";

const who = { label: "gitea-7-1", pool: "small", instance: "s-1a2b3c4d", backend: "vm" };
const template = { ImageId: "ami-0123456789abcdef0", InstanceType: "m7i.large", SecurityGroupIds: ["sg-01", "sg-02"], Tags: { team: "ci" } };

describe("the EC2 query protocol", () => {
  it("writes lists as Name.N under their serialized names, and the fake reads back the same input", async () => {
    const body = runBody(who, "#!/bin/sh\necho hi\n", [template], { market: "spot", candidate: { InstanceType: "c7i.large", SubnetId: "subnet-0a" } }, "tok-1");
    const form = encodeRequest("RunInstances", { ...body, MinCount: 1, MaxCount: 1 });
    expect(form.get("Action")).toBe("RunInstances");
    expect(form.get("Version")).toBe("2016-11-15");
    expect(form.get("SecurityGroupId.2")).toBe("sg-02");
    expect(form.get("TagSpecification.1.ResourceType")).toBe("instance");
    expect(form.get("TagSpecification.2.ResourceType")).toBe("volume");
    expect(form.get("TagSpecification.1.Tag.1.Key")).toBe("team");
    expect(form.get("InstanceMarketOptions.MarketType")).toBe("spot");
    expect(form.get("InstanceInitiatedShutdownBehavior")).toBe("terminate");
    expect(form.get("MetadataOptions.HttpTokens")).toBe("required");
    expect(form.get("ClientToken")).toBe("tok-1");
    expect(form.get("InstanceType")).toBe("c7i.large");
    const read = readRequest(form.toString());
    expect(read.action).toBe("RunInstances");
    expect(read.input).toEqual({ ...body, MinCount: 1, MaxCount: 1 });
  });

  it("refuses, naming the field: an unknown member (named like a prototype's too), a value outside the enum, a wrong type, a missing required member", () => {
    const base = { ImageId: "ami-0123456789abcdef0", MinCount: 1, MaxCount: 1 };
    expect(checkRequest("RunInstances", base)).toEqual([]);
    expect(checkRequest("RunInstances", { ...base, Colour: "red" })).toEqual(["RunInstances.Colour is not a member of RunInstancesRequest"]);
    expect(checkRequest("RunInstances", { ...base, constructor: "x" })).toEqual(["RunInstances.constructor is not a member of RunInstancesRequest"]);
    expect(checkRequest("RunInstances", { ...base, InstanceInitiatedShutdownBehavior: "explode" })).toEqual([
      "RunInstances.InstanceInitiatedShutdownBehavior must be one of stop, terminate",
    ]);
    expect(checkRequest("RunInstances", { ...base, MinCount: "1" })).toEqual(["RunInstances.MinCount must be an integer (Integer)"]);
    expect(checkRequest("RunInstances", { ImageId: "ami-0123456789abcdef0", MaxCount: 1 })).toEqual(["RunInstances.MinCount is required"]);
    expect(checkRequest("RunInstances", { ...base, TagSpecifications: [{ ResourceType: "instance", Tags: [{ Key: "k", Value: 1 }] }] })).toEqual([
      "RunInstances.TagSpecifications[0].Tags[0].Value must be a string (String)",
    ]);
    expect(checkRequest("Reboot", {})).toEqual(["Reboot is not an operation of the EC2 model"]);
    // The fake refuses alike, by EC2's codes.
    expect(() => readRequest("Action=RunInstances&Version=2016-11-15&MaxCount=1&ImageId=ami-1")).toThrow(expect.objectContaining({ code: "MissingParameter" }));
    expect(() => readRequest("Action=RunInstances&Version=2016-11-15&MinCount=1&MaxCount=1&Colour=red")).toThrow(
      expect.objectContaining({ code: "UnknownParameter" }),
    );
    expect(() => readRequest("Action=RunInstances&Version=2016-11-15&MinCount=one&MaxCount=1")).toThrow(
      expect.objectContaining({ code: "InvalidParameterValue" }),
    );
    expect(() => readRequest("Action=RunInstances&Version=2016-11-15&MinCount=1&MaxCount=1&SecurityGroupId.2=sg-1")).toThrow(
      expect.objectContaining({ code: "InvalidParameterValue" }),
    );
  });

  it("a template may not set what the dispatcher sets, nor its tags", () => {
    expect(checkTemplate("VM_TEMPLATE", template)).toEqual([]);
    expect(checkTemplate("VM_TEMPLATE", { ...template, ClientToken: "x", UserData: "y" })).toEqual([
      'VM_TEMPLATE["ClientToken"] is set by the dispatcher, not by a template',
      'VM_TEMPLATE["UserData"] is set by the dispatcher, not by a template',
    ]);
    expect(checkTemplate("VM_TEMPLATE", { Tags: { "gdr-assignment": "x" } })).toEqual(['VM_TEMPLATE["Tags"]["gdr-assignment"] is a tag the dispatcher sets']);
    expect(checkTemplate("VM_TEMPLATE", { Tags: { team: 1 } })).toEqual(['VM_TEMPLATE["Tags"] must be an object of strings']);
  });

  it("attempts: each candidate on the pool's market, then on-demand with spotFallback; tokens at most 64, apart by assignment, round and attempt", async () => {
    const c = [
      { InstanceType: "m7i.large", SubnetId: "subnet-0a" },
      { InstanceType: "c7i.large", SubnetId: "subnet-0b" },
    ];
    expect(attemptsOf(undefined)).toEqual([{ candidate: undefined, market: "on-demand" }]);
    expect(attemptsOf({ candidates: c, market: "spot" }).map((a) => a.market)).toEqual(["spot", "spot"]);
    expect(attemptsOf({ candidates: c, market: "spot", spotFallback: "on-demand" }).map((a) => `${a.market} ${a.candidate!.SubnetId}`)).toEqual([
      "spot subnet-0a",
      "spot subnet-0b",
      "on-demand subnet-0a",
      "on-demand subnet-0b",
    ]);
    expect(attemptsOf({ candidates: c, market: "on-demand", spotFallback: "on-demand" })).toHaveLength(2);
    const t = await clientToken("s-1", "gitea-7-1", 0, 0);
    expect(t.length).toBeLessThanOrEqual(64);
    expect(await clientToken("s-1", "gitea-7-1", 0, 0)).toBe(t);
    for (const other of [
      clientToken("s-1", "gitea-7-2", 0, 0),
      clientToken("s-2", "gitea-7-1", 0, 0),
      clientToken("s-1", "gitea-7-1", 1, 0),
      clientToken("s-1", "gitea-7-1", 0, 1),
    ])
      expect(await other).not.toBe(t);
    // An id of the longest kind still gives at most 64.
    expect((await clientToken("s-1", "x".repeat(200), 99, 15)).length).toBeLessThanOrEqual(64);
  });

  it("reads pages, instances and errors from EC2's XML", () => {
    const xml = answer("DescribeInstances", {
      requestId: "r",
      reservationSet: [
        {
          reservationId: "r-1",
          instancesSet: [
            {
              instanceId: "i-0123",
              instanceType: "m7i.large",
              instanceState: { code: 80, name: "stopped" },
              launchTime: "2026-12-05T10:00:00.000Z",
              instanceLifecycle: "spot",
              stateReason: { code: "Server.SpotInstanceTermination", message: "x" },
              tagSet: [{ key: "gdr-assignment", value: "007" }],
            },
          ],
        },
      ],
      nextToken: "n-2",
    });
    expect(readDescribeInstances(xml)).toEqual({
      instances: [
        {
          id: "i-0123",
          type: "m7i.large",
          state: "stopped",
          launchTime: "2026-12-05T10:00:00.000Z",
          lifecycle: "spot",
          stateReason: "Server.SpotInstanceTermination",
          tags: { "gdr-assignment": "007" },
        },
      ],
      nextToken: "n-2",
    });
    expect(readDescribeInstances(answer("DescribeInstances", { requestId: "r", reservationSet: [] }))).toEqual({ instances: [] });
    expect(readError(errorXml("InsufficientInstanceCapacity", "no room", "req-1"))).toEqual({
      code: "InsufficientInstanceCapacity",
      message: "no room",
      requestId: "req-1",
    });
    expect(readError("<html>bad gateway</html>")).toBeUndefined();
  });
});
