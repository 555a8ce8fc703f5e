// Which gateway object serves a key: a pure function, kept apart from the object (and from
// cloudflare:workers) so that it can be checked anywhere.

export const gatewayName = (shard: number) => `nats-gateway-${shard}`;

/** FNV-1a of the key, modulo the shard count: the calls of one assignment go to one object. */
export function shardOf(key: string, shards: number): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < key.length; i++) h = Math.imul(h ^ key.charCodeAt(i), 0x01000193);
  return (h >>> 0) % shards;
}
