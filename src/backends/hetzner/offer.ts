// What a Hetzner project may create with: its server types (each with where it is sold and its
// architecture), the locations and the images (system names and snapshot ids, each with its
// architectures). Read from the API on the cron tick (offer-refresh.ts), kept in the backend's
// figures, and every pool's placement checked against it in /healthz: a name the project cannot
// create with is named, with its pool and field, before a job asks for a server.
// Read from hcloud-openapi's list_server_types, list_locations and list_images (upstream/README.md).
import type { PoolPlacement } from "../../domain/backend.ts";
import { offerDue, type DriverFigureStore, type Offer } from "../../state/driver-figures.ts";
import { fieldSource, mismatchesOf, placementsOf, shownValue, type FieldLayers, type Mismatch } from "../refused-field.ts";
import type { HetznerApi } from "./client.ts";

export interface HetznerOffer {
  /** By name: its architecture and the locations it is sold in now (none past its unavailable_after). */
  serverTypes: Record<string, { arch: string; in: string[] }>;
  locations: string[];
  /** By name (system and app images) and by id (every image, snapshots included): the architectures it exists for. */
  images: Record<string, string[]>;
}

interface ListedType {
  name: string;
  architecture: string;
  locations?: { name: string; deprecation?: { unavailable_after?: string } | null }[];
}
interface ListedImage {
  id: number;
  name?: string | null;
  architecture: string;
}

/** The project's offer, read in full (every page of the three lists): throws when any list is not read to its end. */
export async function readOffer(api: HetznerApi, signal: AbortSignal, now: number): Promise<HetznerOffer> {
  // One after another: the tick's other calls keep the invocation's connections.
  const types = (await api.list("server_types", "", signal)) as ListedType[];
  const locations = (await api.list("locations", "", signal)) as { name: string }[];
  // A deprecated image can still be created from until it leaves the list.
  const images = (await api.list("images", "status=available&include_deprecated=true", signal)) as ListedImage[];
  const serverTypes: HetznerOffer["serverTypes"] = {};
  for (const t of types) {
    const sold = (t.locations ?? []).filter((l) => !(Date.parse(l.deprecation?.unavailable_after ?? "") <= now));
    serverTypes[t.name] = { arch: t.architecture, in: sold.map((l) => l.name) };
  }
  const byKey: HetznerOffer["images"] = {};
  const add = (key: string, arch: string) => (byKey[key] = [...new Set([...(Object.hasOwn(byKey, key) ? byKey[key]! : []), arch])]);
  for (const i of images) {
    add(String(i.id), i.architecture);
    if (i.name) add(i.name, i.architecture);
  }
  return { serverTypes, locations: locations.map((l) => l.name), images: byKey };
}

const some = (names: readonly string[]) => `${names.slice(0, 8).join(", ")}${names.length > 8 ? ", …" : ""}`;
const own = <T>(o: Record<string, T>, key: unknown): T | undefined =>
  typeof key === "string" || typeof key === "number" ? (Object.hasOwn(o, String(key)) ? o[String(key)] : undefined) : undefined;

/**
 * What in one placement (a pool's template over the backend's, with one of its candidates) the
 * project cannot create with: an unknown server type, location or image, a type not sold in its
 * location, an image not made for the type's architecture. Fields no layer sets are Hetzner's to choose.
 */
export function offerMismatches(offer: HetznerOffer, layers: FieldLayers): Mismatch[] {
  const type = fieldSource("server_type", layers);
  const location = fieldSource("location", layers);
  const image = fieldSource("image", layers);
  const out: Mismatch[] = [];
  const say = (where: { variable: string; value?: unknown }, why: string, variable = where.variable) =>
    out.push({ variable, message: `${where.variable}${shownValue(where.value)} ${why}` });
  const sold = own(offer.serverTypes, type.value);
  if (type.value !== undefined && !sold) say(type, `is no server type the project can create (${some(Object.keys(offer.serverTypes).sort())})`);
  const place = typeof location.value === "string" ? location.value : location.value === undefined ? undefined : JSON.stringify(location.value);
  if (place !== undefined && !offer.locations.includes(place)) say(location, `is no location of Hetzner's (${some(offer.locations)})`);
  else if (place !== undefined && sold && !sold.in.includes(place))
    say(
      type,
      `is not sold in location ${JSON.stringify(place)} (${location.variable}); it is in ${some(sold.in) || "no location now"}`,
      `${type.variable} or ${location.variable}`,
    );
  const arches = own(offer.images, image.value);
  if (image.value !== undefined && !arches) say(image, "is no image the project can create from (a system image's name, or a snapshot's id)");
  else if (arches && sold && !arches.includes(sold.arch))
    say(image, `is made for ${arches.join(" and ")}, and server type ${JSON.stringify(type.value)} is ${sold.arch}`);
  return out;
}

/** The mismatches of every placement, each once. */
export function offerProblems(offer: HetznerOffer, placements: readonly FieldLayers[]): Mismatch[] {
  return mismatchesOf(placements, (layers) => offerMismatches(offer, layers));
}

/** Where a backend places its servers: the API it creates with, its template and its pools'. */
export interface Placing {
  url: string;
  templateVariable: string;
  template: Record<string, unknown> | undefined;
  pools: readonly PoolPlacement[];
}

/** The mismatches of a backend's placements with its kept offer; none when the offer is another API's, or not read yet. */
export function placingProblems(p: Placing, offer: Offer | undefined): Mismatch[] {
  if (!offer || offer.of !== p.url) return [];
  return offerProblems(offer.data as HetznerOffer, placementsOf(p.templateVariable, p.template, p.pools));
}

/**
 * On the tick, after the sweep: the offer read again when due (offerDue) and kept in the backend's
 * figures; `kept` is the one the figures held. Says whether it read.
 */
export async function refreshOffer(
  c: { api: HetznerApi; figures: DriverFigureStore; backend: string; now: () => number; signal: AbortSignal },
  p: Placing,
  kept: Offer | undefined,
): Promise<boolean> {
  if (!offerDue(kept, p.url, c.now(), placingProblems(p, kept).length > 0)) return false;
  const data = await readOffer(c.api, c.signal, c.now());
  await c.figures.change(c.backend, (f) => ({ ...f, offer: { at: c.now(), of: p.url, data } }));
  return true;
}
