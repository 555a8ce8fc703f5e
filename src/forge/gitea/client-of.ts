// The Gitea client behind a dispatcher's forge: Gitea's own modules (the webhook's replay check,
// the sweep) call Gitea's API, which the Forge contract does not carry, through the forge the
// dispatcher was built with, so that the dispatcher's context names no forge.
import type { Forge } from "../../domain/forge.ts";
import type { GiteaClient } from "./client.ts";

const clients = new WeakMap<Forge<never>, GiteaClient>();

/** Returns `forge`, known from now on to be `client`'s. */
export function keepClient<F extends Forge<never>>(client: GiteaClient, forge: F): F {
  clients.set(forge, client);
  return forge;
}

/** The Gitea client of `forge`; undefined when it is no Gitea forge (or none). */
export function giteaClientOf(forge: Forge<never> | undefined): GiteaClient | undefined {
  return forge ? clients.get(forge) : undefined;
}
