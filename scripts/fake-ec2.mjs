// An EC2 API for what the ec2 driver uses: RunInstances, DescribeInstances and TerminateInstances
// over the query protocol, and DescribeImages and DescribeInstanceTypeOfferings (what the pools name). It follows the real contract (fake-ec2-rules.mjs): a SigV4 signature
// (AuthFailure), each request read back through the service model (UnknownParameter,
// InvalidParameterValue, MissingParameter), ClientToken idempotency (the same token with other
// parameters is IdempotentParameterMismatch), DescribeInstances filters and NextToken pages, XML
// answers and <Response><Errors>. Instances boot after `bootMs`; with `mode.simulate` each runs a
// simulated runner (simulate-hetzner.mjs) that fetches its launch, claims, works and completes.
// Tests share one server, each under a path prefix of its own. Control endpoints under
// /<prefix>/_control: `mode` (faults: no capacity for a type or subnet or on Spot, the account's
// instance limit, throttling, 5xx, hangs, rotated `credentials`), `end` (an instance ends, with its
// state reason), `state`.
import { randomBytes } from "node:crypto";
import { startTenantServer } from "./fake-http.mjs";
import { runSimulatedServer } from "./simulate-hetzner.mjs";
import { answer, errorXml, FAKE_AWS, readRequest, Refusal, signatureProblem } from "./fake-ec2-rules.mjs";

export { FAKE_AWS };
export const FAKE_REGION = "eu-central-1";
const INSTANCE_TYPES = new Set(["t3.micro", "t3.small", "m7i.large", "m7i.xlarge", "c7i.large", "c7i.2xlarge"]);
/** The AMIs the account can launch, with their architectures (mode.amis adds more). */
export const AMIS = { "ami-0123456789abcdef0": "x86_64", "ami-0fedcba9876543210": "arm64" };
const amisOf = (a) => ({ ...AMIS, ...a.mode.amis });
/** The values of the filter `name` (one filter of each name here), or undefined when there is none. */
const filtered = (input, name) => (input.Filters ?? []).find((f) => f.Name === name)?.Values;
const STATE_CODES = { pending: 0, running: 16, "shutting-down": 32, terminated: 48, stopping: 64, stopped: 80 };

const newAccount = () => ({
  instances: new Map(),
  tokens: new Map(),
  pages: new Map(),
  requests: [],
  calls: 0,
  mode: { bootMs: 0, noCapacity: [], instanceLimit: Infinity, throttleFirst: 0, failFirst: 0, hangFirst: 0, hangMs: 5_000 },
});

export function startFakeEc2({ log } = {}) {
  return startTenantServer(newAccount, serve, { contentType: "text/xml;charset=UTF-8" });

  async function serve({ req, res, text, url, path, tenant: a }) {
    // Where this account is served: its instances' IMDS is under it.
    a.base ??= `http://${req.headers.host}/${url.pathname.split("/")[1]}`;
    const reply = (status, body) => {
      res.writeHead(status, { "content-type": "text/xml;charset=UTF-8" });
      res.end(body);
    };
    if (path.startsWith("/_control/")) return control(a, path.slice(10), req.method, text, (s, b) => reply(s, JSON.stringify(b)));
    if (path.startsWith("/_imds/")) return imds(a, path.slice(7), req, res);
    const requestId = randomBytes(16).toString("hex");
    const entry = { method: req.method, path, body: text, at: Date.now() };
    a.requests.push(entry);
    const refuse = (r) => {
      entry.error = r.code;
      return reply(r.status, errorXml(r.code, r.message, requestId));
    };
    if (req.method !== "POST") return refuse(new Refusal(400, "InvalidAction", "use POST"));
    const why = signatureProblem(req, text, { ...FAKE_AWS, ...a.mode.credentials }, FAKE_REGION);
    if (why) return refuse(new Refusal(401, "AuthFailure", `AWS was not able to validate the provided access credentials (${why})`));
    let call;
    try {
      call = readRequest(text);
    } catch (err) {
      if (err instanceof Refusal) return refuse(err);
      throw err;
    }
    entry.action = call.action;
    entry.input = call.input;
    const n = ++a.calls;
    if (n <= a.mode.hangFirst) {
      await new Promise((r) => setTimeout(r, a.mode.hangMs));
      return refuse(new Refusal(503, "Unavailable", "The server is overloaded"));
    }
    if (n <= a.mode.hangFirst + a.mode.throttleFirst) return refuse(new Refusal(503, "RequestLimitExceeded", "Request limit exceeded."));
    if (n <= a.mode.hangFirst + a.mode.throttleFirst + a.mode.failFirst)
      return refuse(
        a.mode.failStatus === 503
          ? new Refusal(503, "Unavailable", "The server is overloaded and can't handle the request")
          : new Refusal(500, "InternalError", "An internal error has occurred"),
      );
    if (call.action === "DescribeInstances" && (a.mode.failDescribeCalls ?? []).includes((a.describes = (a.describes ?? 0) + 1)))
      return refuse(new Refusal(500, "InternalError", "An internal error has occurred"));
    try {
      const body = {
        RunInstances: run,
        DescribeInstances: describe,
        TerminateInstances: terminate,
        DescribeImages: describeImages,
        DescribeInstanceTypeOfferings: typeOfferings,
      }[call.action]?.(a, call.input);
      if (!body) return refuse(new Refusal(400, "UnsupportedOperation", `${call.action} is not served by this fake`));
      return reply(200, answer(call.action, { requestId, ...body }));
    } catch (err) {
      if (err instanceof Refusal) return refuse(err);
      throw err;
    }
  }

  function run(a, input) {
    if (input.MinCount !== 1 || input.MaxCount !== 1) throw new Refusal(400, "InvalidParameterValue", "this fake makes one instance per request");
    const params = JSON.stringify(input);
    const token = input.ClientToken;
    if (token !== undefined) {
      if (token.length > 64) throw new Refusal(400, "InvalidParameterValue", "ClientToken is longer than 64 characters");
      const before = a.tokens.get(token);
      if (before && before.params !== params) throw new Refusal(400, "IdempotentParameterMismatch", "The client token has been used with other parameters");
      if (before) return reservation(a.instances.get(before.id));
    }
    if (!/^ami-[0-9a-f]{8,17}$/.test(input.ImageId ?? "")) throw new Refusal(400, "InvalidAMIID.Malformed", `Invalid id: "${input.ImageId}"`);
    if (!Object.hasOwn(amisOf(a), input.ImageId)) throw new Refusal(400, "InvalidAMIID.NotFound", `The image id '[${input.ImageId}]' does not exist`);
    if (!INSTANCE_TYPES.has(input.InstanceType)) throw new Refusal(400, "InvalidParameterValue", `Invalid value '${input.InstanceType}' for InstanceType.`);
    if (input.SubnetId !== undefined && !/^subnet-[0-9a-f]{8,17}$/.test(input.SubnetId))
      throw new Refusal(400, "InvalidSubnetID.Malformed", `Invalid id: "${input.SubnetId}"`);
    const userData = input.UserData === undefined ? "" : Buffer.from(input.UserData, "base64").toString("utf8");
    if (userData.length > 16 * 1024) throw new Refusal(400, "InvalidParameterValue", "User data is limited to 16384 bytes");
    const spot = input.InstanceMarketOptions?.MarketType === "spot";
    const where = { InstanceType: input.InstanceType, SubnetId: input.SubnetId, market: spot ? "spot" : "on-demand" };
    const short = a.mode.noCapacity.find((u) => Object.entries(u).every(([k, v]) => where[k] === v));
    if (short) throw new Refusal(500, short.code ?? "InsufficientInstanceCapacity", `We currently do not have sufficient ${input.InstanceType} capacity.`);
    const live = [...a.instances.values()].filter((i) => i.state !== "terminated").length;
    if (live >= a.mode.instanceLimit)
      throw new Refusal(400, "InstanceLimitExceeded", "You have requested more instances than your current instance limit allows.");
    const tags = Object.fromEntries(
      (input.TagSpecifications ?? []).filter((t) => t.ResourceType === "instance").flatMap((t) => (t.Tags ?? []).map((x) => [x.Key, x.Value])),
    );
    const id = `i-${randomBytes(8).toString("hex")}`;
    const instance = { id, ...where, imageId: input.ImageId, userData, name: id, tags, state: "pending", launchedAt: Date.now(), input, clientToken: token };
    a.instances.set(id, instance);
    log?.(`[ec2] instance ${id}: launched (${where.InstanceType} ${where.market} in ${where.SubnetId ?? "the default subnet"}, ${input.ImageId})`);
    if (token !== undefined) a.tokens.set(token, { params, id });
    setTimeout(() => {
      if (instance.state !== "pending") return;
      instance.state = "running";
      if (a.mode.simulate)
        void runSimulatedServer(instance, {
          ...a.mode.simulate,
          // A claim delay (a window for a notice before the claim) is a Spot instance's only: a replacement claims at once.
          claimAfterMs: spot ? (a.mode.simulate.claimAfterMs ?? 0) : 0,
          log,
          alive: () => instance.state === "running",
          imds: `${a.base}/_imds/${instance.id}`,
        }).catch(() => undefined);
    }, a.mode.bootMs);
    return reservation(instance);
  }

  function describe(a, input) {
    if (input.InstanceIds && input.MaxResults !== undefined)
      throw new Refusal(400, "InvalidParameterCombination", "The parameter instancesSet cannot be used with the parameter maxResults");
    let all = [...a.instances.values()];
    if (input.InstanceIds) {
      const missing = input.InstanceIds.filter((id) => !a.instances.has(id));
      if (missing.length) throw new Refusal(400, "InvalidInstanceID.NotFound", `The instance IDs '${missing.join(", ")}' do not exist`);
      all = all.filter((i) => input.InstanceIds.includes(i.id));
    }
    for (const f of input.Filters ?? []) all = all.filter((i) => matches(i, f));
    let start = 0;
    if (input.NextToken !== undefined) {
      if (!a.pages.has(input.NextToken)) throw new Refusal(400, "InvalidParameterValue", "Invalid NextToken");
      start = a.pages.get(input.NextToken);
    }
    const size = input.MaxResults ?? all.length;
    if (input.MaxResults !== undefined && (size < 5 || size > 1000)) throw new Refusal(400, "InvalidParameterValue", "MaxResults must be between 5 and 1000");
    const page = all.slice(start, start + size);
    let nextToken;
    if (start + size < all.length) {
      nextToken = randomBytes(12).toString("hex");
      a.pages.set(nextToken, start + size);
    }
    return {
      reservationSet: page.map((i) => ({ reservationId: `r-${i.id.slice(2)}`, ownerId: "123456789012", instancesSet: [view(i)] })),
      ...(nextToken ? { nextToken } : {}),
    };
  }

  // DescribeImages by the image-id filter: the images found (an id not there is left out, no error), all on one page.
  function describeImages(a, input) {
    if (input.ImageIds && input.MaxResults !== undefined)
      throw new Refusal(400, "InvalidParameterCombination", "The parameter imageIdsSet cannot be used with the parameter maxResults");
    const ids = [...(filtered(input, "image-id") ?? Object.keys(amisOf(a))), ...(input.ImageIds ?? [])];
    const found = ids.filter((id) => Object.hasOwn(amisOf(a), id));
    const missing = (input.ImageIds ?? []).filter((id) => !Object.hasOwn(amisOf(a), id));
    if (missing.length) throw new Refusal(400, "InvalidAMIID.NotFound", `The image id '[${missing.join(", ")}]' does not exist`);
    return {
      imagesSet: [...new Set(found)].map((id) => ({
        imageId: id,
        imageLocation: `amazon/${id}`,
        imageState: "available",
        imageOwnerId: "099720109477",
        creationDate: "2026-10-01T00:00:00.000Z",
        isPublic: true,
        architecture: amisOf(a)[id],
        imageType: "machine",
        name: `ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-${amisOf(a)[id] === "arm64" ? "arm64" : "amd64"}-server`,
        rootDeviceType: "ebs",
        virtualizationType: "hvm",
        hypervisor: "xen",
      })),
    };
  }

  // DescribeInstanceTypeOfferings in the region, by the instance-type filter; MaxResults 5-1000, NextToken pages.
  function typeOfferings(a, input) {
    if ((input.LocationType ?? "region") !== "region") throw new Refusal(400, "InvalidParameterValue", "this fake offers by region only");
    const wanted = filtered(input, "instance-type");
    const all = [...INSTANCE_TYPES].filter((t) => !wanted || wanted.includes(t));
    let start = 0;
    if (input.NextToken !== undefined) {
      if (!a.pages.has(input.NextToken)) throw new Refusal(400, "InvalidParameterValue", "Invalid NextToken");
      start = a.pages.get(input.NextToken);
    }
    const size = input.MaxResults ?? 1000;
    const page = all.slice(start, start + size);
    let nextToken;
    if (start + size < all.length) a.pages.set((nextToken = randomBytes(12).toString("hex")), start + size);
    return {
      instanceTypeOfferingSet: page.map((t) => ({ instanceType: t, locationType: "region", location: FAKE_REGION })),
      ...(nextToken ? { nextToken } : {}),
    };
  }

  function terminate(a, input) {
    const missing = input.InstanceIds.filter((id) => !a.instances.has(id));
    if (missing.length) throw new Refusal(400, "InvalidInstanceID.NotFound", `The instance IDs '${missing.join(", ")}' do not exist`);
    return {
      instancesSet: input.InstanceIds.map((id) => {
        const i = a.instances.get(id);
        const previousState = { code: STATE_CODES[i.state], name: i.state };
        if (i.state !== "terminated") {
          Object.assign(i, { state: "terminated", terminatedAt: Date.now() });
          log?.(`[ec2] instance ${id}: terminated after ${Math.round((i.terminatedAt - i.launchedAt) / 1000)} s`);
        }
        return { instanceId: id, currentState: { code: 32, name: "shutting-down" }, previousState };
      }),
    };
  }

  function matches(i, { Name, Values = [] }) {
    if (Name.startsWith("tag:")) return Values.includes(i.tags[Name.slice(4)]);
    if (Name === "instance-state-name") return Values.includes(i.state);
    if (Name === "instance-id") return Values.includes(i.id);
    // DescribeInstances' "client-token" filter: "The idempotency token you provided when you launched the instance."
    if (Name === "client-token") return Values.includes(i.clientToken);
    throw new Refusal(400, "InvalidParameterValue", `The filter '${Name}' is invalid`);
  }

  function reservation(i) {
    return { reservationId: `r-${i.id.slice(2)}`, ownerId: "123456789012", groupSet: [], instancesSet: [view(i)] };
  }

  function view(i) {
    return {
      instanceId: i.id,
      imageId: i.imageId,
      instanceState: { code: STATE_CODES[i.state], name: i.state },
      instanceType: i.InstanceType,
      launchTime: new Date(i.launchedAt).toISOString(),
      ...(i.SubnetId ? { subnetId: i.SubnetId } : {}),
      ...(i.market === "spot" ? { instanceLifecycle: "spot" } : {}),
      ...(i.stateReason ? { stateReason: { code: i.stateReason, message: i.stateReason } } : {}),
      ...(i.clientToken ? { clientToken: i.clientToken } : {}),
      tagSet: Object.entries(i.tags).map(([key, value]) => ({ key, value })),
    };
  }

  // Each instance's IMDSv2, at /_imds/<instance id>: a session token (PUT), then spot/instance-action
  // with it, 404 until EC2 gives notice; 401 without a token, as IMDSv2 with HttpTokens=required.
  function imds(a, rest, req, res) {
    const [id, ...tail] = rest.split("/");
    const i = a.instances.get(id);
    const what = `/${tail.join("/")}`;
    const send = (status, body = "") => (res.writeHead(status, { "content-type": "text/plain" }), res.end(body));
    if (!i || i.state !== "running") return send(404);
    if (what === "/latest/api/token" && req.method === "PUT") {
      if (!req.headers["x-aws-ec2-metadata-token-ttl-seconds"]) return send(400);
      i.imdsToken ??= randomBytes(16).toString("hex");
      return send(200, i.imdsToken);
    }
    if (req.headers["x-aws-ec2-metadata-token"] !== i.imdsToken || !i.imdsToken) return send(401);
    if (what === "/latest/meta-data/spot/instance-action" && req.method === "GET") return i.notice ? send(200, JSON.stringify(i.notice)) : send(404);
    return send(404);
  }

  function control(a, what, method, text, send) {
    // EC2 takes a Spot instance back: its IMDS shows the notice at once, and it ends `noticeMs`
    // later (two minutes on EC2; test time here), with StateReason Server.SpotInstanceTermination.
    if (what === "interrupt" && method === "POST") {
      const { id, noticeMs = 120_000 } = JSON.parse(text);
      const i = a.instances.get(id);
      if (!i || i.market !== "spot" || i.state !== "running") return send(409, { error: "no running Spot instance of that id" });
      i.notice = { action: "terminate", time: new Date(Date.now() + noticeMs).toISOString().replace(/\.\d+Z$/, "Z") };
      setTimeout(() => {
        if (i.state === "running" || i.state === "pending") Object.assign(i, { state: "terminated", stateReason: "Server.SpotInstanceTermination" });
      }, noticeMs);
      return send(200, { notice: i.notice });
    }
    if (what === "mode" && method === "POST") {
      a.mode = { ...a.mode, ...JSON.parse(text || "{}") };
      a.calls = 0;
      a.describes = 0;
      return send(200, a.mode);
    }
    // An instance ends as the test says (`stateReason`: e.g. Server.SpotInstanceTermination).
    if (what === "end" && method === "POST") {
      const { id, state = "terminated", stateReason } = JSON.parse(text);
      const i = a.instances.get(id);
      if (!i) return send(404, { error: "no such instance" });
      Object.assign(i, { state, ...(stateReason ? { stateReason } : {}) });
      return send(200, {});
    }
    // EC2 forgets a terminated instance after a while: its id is then not found at all.
    if (what === "forget" && method === "POST") {
      a.instances.delete(JSON.parse(text).id);
      return send(200, {});
    }
    if (what === "state") return send(200, { instances: [...a.instances.values()], requests: a.requests });
    return send(404, { error: "unknown control" });
  }
}
