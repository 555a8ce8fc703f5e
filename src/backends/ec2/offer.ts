// What an EC2 account may launch in its region, of what the pools name: the instance types offered
// there (DescribeInstanceTypeOfferings) and the AMIs it can see (DescribeImages, with their
// architectures). Unlike Hetzner's short lists, EC2's hold hundreds of types and millions of AMIs:
// only the names the placements hold are asked, and an offer that did not ask a name says nothing
// of it (a new name is asked at the next tick). Read on the tick, kept in the backend's figures,
// and held against every placement in /healthz. Both operations are in upstream/ec2-runinstances.json.
import type { PoolPlacement } from "../../domain/backend.ts";
import { offerDue, type DriverFigureStore, type Offer } from "../../state/driver-figures.ts";
import { fieldSource, mismatchesOf, placementsOf, shownValue, type FieldLayers, type Mismatch } from "../refused-field.ts";
import type { Ec2Api } from "./client.ts";

export interface Ec2Offer {
  /** The instance types asked, and those offered in the region. */
  types: { asked: string[]; offered: string[] };
  /** The AMIs asked, and those found with their architectures (x86_64, arm64). */
  images: { asked: string[]; found: Record<string, string> };
}

const text = (v: unknown) => (typeof v === "string" ? v : undefined);

/** The instance types and AMIs the placements name. */
export function askedOf(placements: readonly FieldLayers[]): { types: string[]; images: string[] } {
  const each = (field: string) => [...new Set(placements.flatMap((l) => text(fieldSource(field, l).value) ?? []))].sort();
  return { types: each("InstanceType"), images: each("ImageId") };
}

/** The account's offer of what is asked; throws when either list is not read to its end. */
export async function readOffer(api: Ec2Api, asked: { types: string[]; images: string[] }, signal: AbortSignal): Promise<Ec2Offer> {
  const offered = asked.types.length ? await api.typesOffered(asked.types, signal) : [];
  const found = asked.images.length ? await api.images(asked.images, signal) : [];
  return {
    types: { asked: asked.types, offered: [...new Set(offered)].sort() },
    images: { asked: asked.images, found: Object.fromEntries(found.map((i) => [i.id, i.arch])) },
  };
}

/** What in one placement the account cannot launch: an instance type not offered in its region, an AMI it cannot see. */
export function offerMismatches(offer: Ec2Offer, layers: FieldLayers): Mismatch[] {
  const out: Mismatch[] = [];
  const type = fieldSource("InstanceType", layers);
  const image = fieldSource("ImageId", layers);
  const t = text(type.value);
  const i = text(image.value);
  if (t !== undefined && offer.types.asked.includes(t) && !offer.types.offered.includes(t))
    out.push({ variable: type.variable, message: `${type.variable}${shownValue(t)} is no instance type offered in this region` });
  if (i !== undefined && offer.images.asked.includes(i) && !Object.hasOwn(offer.images.found, i))
    out.push({ variable: image.variable, message: `${image.variable}${shownValue(i)} is no AMI this account can launch in this region` });
  return out;
}

/** Where a backend launches: its region and API, its template and its pools'. */
export interface Launching {
  /** The region and API URL the offer is read from. */
  of: string;
  templateVariable: string;
  template: Record<string, unknown> | undefined;
  pools: readonly PoolPlacement[];
}

/** The mismatches of every placement with the kept offer, each once; none when it is another region's, or not read yet. */
export function launchingProblems(l: Launching, offer: Offer | undefined): Mismatch[] {
  if (!offer || offer.of !== l.of) return [];
  return mismatchesOf(placementsOf(l.templateVariable, l.template, l.pools), (layers) => offerMismatches(offer.data as Ec2Offer, layers));
}

/** Whether the kept offer asked every name the placements hold now. */
const covers = (offer: Offer | undefined, asked: { types: string[]; images: string[] }) => {
  const data = offer?.data as Ec2Offer | undefined;
  return !!data && asked.types.every((t) => data.types.asked.includes(t)) && asked.images.every((i) => data.images.asked.includes(i));
};

/** On the tick, after the sweep: the offer read again when due, or when a placement names what it did not ask. Says whether it read. */
export async function refreshOffer(
  c: { api: Ec2Api; figures: DriverFigureStore; backend: string; now: () => number; signal: AbortSignal },
  l: Launching,
): Promise<boolean> {
  const kept = (await c.figures.get(c.backend))?.offer;
  const asked = askedOf(placementsOf(l.templateVariable, l.template, l.pools));
  const stale = !covers(kept, asked) || offerDue(kept, l.of, c.now(), launchingProblems(l, kept).length > 0);
  if (!stale || (!asked.types.length && !asked.images.length)) return false;
  const data = await readOffer(c.api, asked, c.signal);
  await c.figures.change(c.backend, (f) => ({ ...f, offer: { at: c.now(), of: l.of, data } }));
  return true;
}
