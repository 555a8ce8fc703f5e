// EC2's XML answers, read with a maintained parser (fast-xml-parser, which runs in workerd): the
// instances of RunInstances and DescribeInstances (their `item` lists by the model's locationNames:
// reservationSet, instancesSet, tagSet), the images and instance types offered (imagesSet,
// instanceTypeOfferingSet), the next page's token, and the <Response><Errors> shape.
import { XMLParser } from "fast-xml-parser";

/** What the driver reads of an instance. */
export interface Ec2Instance {
  id: string;
  type: string;
  /** pending, running, shutting-down, terminated, stopping or stopped. */
  state: string;
  launchTime: string;
  subnetId?: string;
  /** "spot" for a Spot instance. */
  lifecycle?: string;
  /** Why it changed state, e.g. Server.SpotInstanceTermination. */
  stateReason?: string;
  /** The ClientToken it was made with: which attempt of which round made it. */
  clientToken?: string;
  tags: Record<string, string>;
}

export interface Ec2ErrorBody {
  code: string;
  message: string;
  requestId?: string;
}

// Every `item` is a list, even of one; values stay text (an id of digits is not a number).
const parser = new XMLParser({ ignoreAttributes: true, parseTagValue: false, isArray: (name) => name === "item" || name === "Error" });

type Node = Record<string, unknown>;
const node = (v: unknown): Node => (typeof v === "object" && v !== null ? (v as Node) : {});
const items = (v: unknown): Node[] => ((node(v).item as unknown[] | undefined) ?? []).map(node);
const text = (v: unknown): string | undefined => (typeof v === "string" ? v : undefined);

function instanceOf(n: Node): Ec2Instance {
  const tags: Record<string, string> = {};
  for (const t of items(n.tagSet)) {
    const key = text(t.key);
    if (key !== undefined) tags[key] = text(t.value) ?? "";
  }
  const subnetId = text(n.subnetId);
  const lifecycle = text(n.instanceLifecycle);
  const stateReason = text(node(n.stateReason).code);
  const clientToken = text(n.clientToken);
  return {
    id: text(n.instanceId) ?? "",
    type: text(n.instanceType) ?? "",
    state: text(node(n.instanceState).name) ?? "",
    launchTime: text(n.launchTime) ?? "",
    ...(subnetId ? { subnetId } : {}),
    ...(lifecycle ? { lifecycle } : {}),
    ...(stateReason ? { stateReason } : {}),
    ...(clientToken ? { clientToken } : {}),
    tags,
  };
}

/** The instances RunInstances made (its Reservation). */
export function readRunInstances(xml: string): Ec2Instance[] {
  return items(node(node(parser.parse(xml)).RunInstancesResponse).instancesSet).map(instanceOf);
}

/** One page of DescribeInstances: its instances and the next page's token. */
export function readDescribeInstances(xml: string): { instances: Ec2Instance[]; nextToken?: string } {
  const res = node(node(parser.parse(xml)).DescribeInstancesResponse);
  const instances = items(res.reservationSet).flatMap((r) => items(r.instancesSet).map(instanceOf));
  const nextToken = text(res.nextToken);
  return nextToken ? { instances, nextToken } : { instances };
}

/** One page of DescribeImages: each image's id and architecture (imagesSet), and the next page's token. */
export function readDescribeImages(xml: string): { items: { id: string; arch: string }[]; nextToken?: string } {
  const res = node(node(parser.parse(xml)).DescribeImagesResponse);
  const found = items(res.imagesSet).map((i) => ({ id: text(i.imageId) ?? "", arch: text(i.architecture) ?? "" }));
  const nextToken = text(res.nextToken);
  return nextToken ? { items: found, nextToken } : { items: found };
}

/** One page of DescribeInstanceTypeOfferings: the instance types offered (instanceTypeOfferingSet), and the next page's token. */
export function readTypeOfferings(xml: string): { items: string[]; nextToken?: string } {
  const res = node(node(parser.parse(xml)).DescribeInstanceTypeOfferingsResponse);
  const found = items(res.instanceTypeOfferingSet).flatMap((o) => text(o.instanceType) ?? []);
  const nextToken = text(res.nextToken);
  return nextToken ? { items: found, nextToken } : { items: found };
}

/** The first error of an error answer, or undefined when the body is not one. */
export function readError(xml: string): Ec2ErrorBody | undefined {
  let doc: Node;
  try {
    doc = node(parser.parse(xml));
  } catch {
    return undefined;
  }
  const res = node(doc.Response);
  const first = (node(res.Errors).Error as unknown[] | undefined)?.map(node)[0];
  const code = text(first?.Code);
  if (!code) return undefined;
  const requestId = text(res.RequestID);
  return { code, message: text(first?.Message) ?? "", ...(requestId ? { requestId } : {}) };
}
