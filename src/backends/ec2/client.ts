// The few EC2 calls the ec2 driver needs: query-protocol requests (query.ts, checked against the
// service model), signed with SigV4 by aws4fetch (made for Workers, no dependencies) and sent
// through the driver's fetch; XML answers (xml.ts). An error answer becomes an Ec2Error with its
// code, which the driver acts on; a network failure or a timeout a BackendError naming the call.
import { AwsClient } from "aws4fetch";
import { BackendError, BackendRefused } from "../../domain/backend.ts";
import { encodeRequest } from "./query.ts";
import { readDescribeImages, readDescribeInstances, readError, readRunInstances, readTypeOfferings, type Ec2Instance } from "./xml.ts";

export interface Ec2Options {
  /** EC2_API_URL, or the region's endpoint. */
  url: string;
  region: string;
  accessKeyId: string;
  secretAccessKey: string;
  fetch?: typeof fetch;
}

/** A refusal the driver acts on by its code (`InsufficientInstanceCapacity`, …). */
export class Ec2Error extends BackendError {
  readonly code: string;
  /** What EC2 said, for a refusal of a parameter (it names the parameter and the value we sent: no secret). */
  readonly said: string;
  constructor(message: string, status: number, code: string, said = "") {
    super(message, status);
    this.code = code;
    this.said = said;
  }
}

/** EC2's refusals of the key pair itself (AWS's "Common client error codes"). */
const KEY_REFUSED = new Set([
  "AuthFailure",
  "InvalidClientTokenId",
  "SignatureDoesNotMatch",
  "IncompleteSignature",
  "MissingAuthenticationToken",
  "OptInRequired",
]);

export interface Ec2Api {
  /** RunInstances of one instance: the instance, or an Ec2Error with the API's code. */
  runInstances(input: Record<string, unknown>, signal: AbortSignal): Promise<Ec2Instance>;
  /** TerminateInstances of one instance; one already gone is fine. */
  terminate(id: string, signal: AbortSignal): Promise<void>;
  /** DescribeInstances, every page; throws when any page fails, so that a list read in part is never taken for the whole. */
  describeAll(input: Record<string, unknown>, signal: AbortSignal): Promise<Ec2Instance[]>;
  /** DescribeImages of these ids (a filter: an id that is not there is left out, not an error), every page. */
  images(ids: readonly string[], signal: AbortSignal): Promise<{ id: string; arch: string }[]>;
  /** DescribeInstanceTypeOfferings in the region, of these types: those offered there, every page. */
  typesOffered(types: readonly string[], signal: AbortSignal): Promise<string[]>;
}

export const endpointOf = (region: string) => `https://ec2.${region}.amazonaws.com/`;

export function createEc2Api(opts: Ec2Options): Ec2Api {
  const doFetch = opts.fetch ?? ((i, init) => fetch(i, init));
  const aws = new AwsClient({ accessKeyId: opts.accessKeyId, secretAccessKey: opts.secretAccessKey, service: "ec2", region: opts.region, retries: 0 });
  const call = async (action: string, input: Record<string, unknown>, signal: AbortSignal): Promise<string> => {
    const body = encodeRequest(action, input).toString();
    let res: Response;
    try {
      const signed = await aws.sign(opts.url, { method: "POST", body, headers: { "content-type": "application/x-www-form-urlencoded; charset=utf-8" } });
      res = await doFetch(signed, { signal });
    } catch (err) {
      const name = (err as Error)?.name;
      throw new BackendError(`${action} ${name === "TimeoutError" || name === "AbortError" ? "timed out" : "failed"}`);
    }
    const text = await res.text();
    if (res.ok) return text;
    const error = readError(text);
    if (!error) throw new BackendError(`${action} answered ${res.status}`, res.status);
    if (KEY_REFUSED.has(error.code))
      throw new BackendRefused(
        `EC2 refused AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (${error.code})`,
        "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
        "credentials",
        res.status,
      );
    if (error.code === "UnauthorizedOperation")
      throw new BackendRefused(
        `EC2 refused ${action} to AWS_ACCESS_KEY_ID's IAM user (UnauthorizedOperation): its policy lacks what examples/ec2-iam-policy.json allows`,
        "AWS_ACCESS_KEY_ID (its IAM policy)",
        "credentials",
        res.status,
      );
    throw new Ec2Error(`${action} answered ${res.status} ${error.code}`, res.status, error.code, error.message);
  };
  /** Every page of a list, by NextToken; a token seen before is a list that would never end. */
  const everyPage = async <T>(
    action: string,
    input: Record<string, unknown>,
    read: (xml: string) => { items: T[]; nextToken?: string },
    signal: AbortSignal,
  ) => {
    const out: T[] = [];
    const seen = new Set<string>();
    for (let token: string | undefined; ;) {
      const page = read(await call(action, { ...input, ...(token ? { NextToken: token } : {}) }, signal));
      out.push(...page.items);
      if (!page.nextToken) return out;
      if (seen.has(page.nextToken)) throw new BackendError(`${action} paged in a circle: the list is not read`);
      seen.add((token = page.nextToken));
    }
  };
  return {
    async runInstances(input, signal) {
      const [instance] = readRunInstances(await call("RunInstances", { ...input, MinCount: 1, MaxCount: 1 }, signal));
      if (!instance?.id) throw new BackendError("RunInstances answered no instance");
      return instance;
    },
    async terminate(id, signal) {
      try {
        await call("TerminateInstances", { InstanceIds: [id] }, signal);
      } catch (err) {
        if (err instanceof Ec2Error && err.code === "InvalidInstanceID.NotFound") return;
        throw err;
      }
    },
    images: (ids, signal) =>
      everyPage("DescribeImages", { Filters: [{ Name: "image-id", Values: [...ids] }], IncludeDeprecated: true }, readDescribeImages, signal),
    typesOffered: (types, signal) =>
      everyPage(
        "DescribeInstanceTypeOfferings",
        { LocationType: "region", Filters: [{ Name: "instance-type", Values: [...types] }], MaxResults: 1000 },
        readTypeOfferings,
        signal,
      ),
    async describeAll(input, signal) {
      const out: Ec2Instance[] = [];
      const seen = new Set<string>();
      for (let token: string | undefined; ;) {
        // MaxResults may not go with InstanceIds.
        const paging = input.InstanceIds ? {} : { MaxResults: 100, ...(token ? { NextToken: token } : {}) };
        const page = readDescribeInstances(await call("DescribeInstances", { ...input, ...paging }, signal));
        out.push(...page.instances);
        if (!page.nextToken) return out;
        if (seen.has(page.nextToken)) throw new BackendError("DescribeInstances paged in a circle: the list is not read");
        seen.add(page.nextToken);
        token = page.nextToken;
      }
    },
  };
}
